package rules

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP finds a request's client address and turns it into a key part.
// The zero value believes only the TCP peer and keys every address whole;
// configs get /32 for IPv4 and /64 for IPv6 unless they say otherwise.
type ClientIP struct {
	// Trusted are the proxies whose forwarding header is believed.
	Trusted []netip.Prefix
	// Header is "X-Forwarded-For" or "Forwarded".
	Header string
	// IPv4Prefix and IPv6Prefix are the leading bits that make a key (0:
	// the whole address).
	IPv4Prefix, IPv6Prefix int
}

// Trusts reports whether r's TCP peer is a trusted proxy, whose forwarding
// headers may be passed on.
func (c ClientIP) Trusts(r *http.Request) bool {
	p := parseHostPort(r.RemoteAddr)
	return p.IsValid() && c.trusted(p)
}

// TrustsAddr reports whether the address a is a trusted proxy.
func (c ClientIP) TrustsAddr(a netip.Addr) bool { return c.trusted(a.Unmap()) }

// Prefix returns a masked as keys mask it (ipv4_prefix, ipv6_prefix): the
// address that stands for one client.
func (c ClientIP) Prefix(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if p, ok := c.mask(a); ok {
		return p.Addr()
	}
	return a
}

// mask returns a's prefix of ipv4_prefix or ipv6_prefix bits. It reports
// false when those bits cover the whole address, or a cannot be masked.
func (c ClientIP) mask(a netip.Addr) (netip.Prefix, bool) {
	bits := c.IPv6Prefix
	if a.Is4() {
		bits = c.IPv4Prefix
	}
	if bits <= 0 || bits >= a.BitLen() {
		return netip.Prefix{}, false
	}
	p, err := a.Prefix(bits)
	return p, err == nil
}

// trusted reports whether a is one of the trusted proxies.
func (c ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr returns r's client address. It is the TCP peer (r.RemoteAddr) unless
// the peer is a trusted proxy; then the forwarding header is read from the
// right, skipping trusted hops, and the first untrusted address is the
// client. A hop that cannot be parsed stops the walk at the last address
// known good. The zero Addr means RemoteAddr was not an address.
func (c ClientIP) Addr(r *http.Request) netip.Addr {
	peer := parseHostPort(r.RemoteAddr)
	if !peer.IsValid() || len(c.Trusted) == 0 || !c.trusted(peer) {
		return peer
	}
	var hops []string
	if c.Header == "Forwarded" {
		hops = forwardedFor(r.Header.Values("Forwarded"))
	} else {
		for _, v := range r.Header.Values("X-Forwarded-For") {
			for h := range strings.SplitSeq(v, ",") {
				hops = append(hops, strings.TrimSpace(h))
			}
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a := parseHop(hops[i])
		if !a.IsValid() {
			break
		}
		client = a
		if !c.trusted(a) {
			break
		}
	}
	return client
}

// Key renders a as a key part: masked to the configured prefix length, so
// that one IPv6 host (which usually owns a /64) is one client.
func (c ClientIP) Key(a netip.Addr) string { return string(c.AppendKey(nil, a)) }

// AppendKey is Key appending to dst.
func (c ClientIP) AppendKey(dst []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(dst, "unknown"...)
	}
	if p, ok := c.mask(a); ok {
		return p.AppendTo(dst)
	}
	return a.AppendTo(dst)
}

// parseHostPort reads a RemoteAddr ("ip:port", or a bare ip).
func parseHostPort(s string) netip.Addr {
	// The usual case first, an IPv4 peer as net/http writes it ("ip:port"):
	// the port is not needed, and parsing it was a third of the cost.
	if i := strings.LastIndexByte(s, ':'); i > 0 && strings.IndexByte(s[:i], ':') < 0 {
		if a, err := netip.ParseAddr(s[:i]); err == nil {
			return a
		}
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(h); err == nil {
			return a.Unmap().WithZone("")
		}
	}
	return netip.Addr{}
}

// parseHop reads one forwarding hop: an address, maybe with a port, maybe
// bracketed (IPv6), maybe quoted (Forwarded). Obfuscated identifiers
// ("unknown", "_hidden") are not addresses.
func parseHop(s string) netip.Addr {
	s = strings.Trim(strings.TrimSpace(s), `"`)
	if s == "" {
		return netip.Addr{}
	}
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}
		}
		s = s[1:end]
	} else if strings.Count(s, ":") == 1 {
		s = s[:strings.IndexByte(s, ':')]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// forwardedFor extracts the for= parameters of Forwarded header values
// (RFC 7239), in order. An element without for= yields "" (not an address,
// which stops the walk).
func forwardedFor(values []string) []string {
	var out []string
	for _, v := range values {
		for elem := range splitQuoted(v, ',') {
			found := ""
			for pair := range splitQuoted(elem, ';') {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
					found = strings.TrimSpace(val)
				}
			}
			out = append(out, found)
		}
	}
	return out
}

// splitQuoted splits s at sep outside double quotes.
func splitQuoted(s string, sep byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		start, inQuote := 0, false
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"':
				inQuote = !inQuote
			case c == '\\' && inQuote:
				i++
			case c == sep && !inQuote:
				if !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
		yield(s[start:])
	}
}
