package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// build compiles c, collecting every problem with the path of its field.
func (c *Config) build() (*Set, []*Error) {
	var errs []*Error
	fail := func(field string, format string, args ...any) {
		errs = append(errs, &Error{Field: field, Err: fmt.Errorf(format, args...)})
	}
	s := &Set{Config: c}

	var err error
	if s.Headers, err = ParseHeaderStyle(c.Headers); err != nil {
		fail("headers", "%v", err)
	}

	ci := c.ClientIP
	s.clientIP = ClientIP{IPv4Prefix: 32, IPv6Prefix: 64, Header: "X-Forwarded-For"}
	if ci.IPv4Prefix != 0 {
		if ci.IPv4Prefix < 1 || ci.IPv4Prefix > 32 {
			fail("client_ip.ipv4_prefix", "%d is not in 1..32", ci.IPv4Prefix)
		}
		s.clientIP.IPv4Prefix = ci.IPv4Prefix
	}
	if ci.IPv6Prefix != 0 {
		if ci.IPv6Prefix < 1 || ci.IPv6Prefix > 128 {
			fail("client_ip.ipv6_prefix", "%d is not in 1..128", ci.IPv6Prefix)
		}
		s.clientIP.IPv6Prefix = ci.IPv6Prefix
	}
	switch strings.ToLower(ci.Header) {
	case "", "x-forwarded-for":
	case "forwarded":
		s.clientIP.Header = "Forwarded"
	default:
		fail("client_ip.header", "%q is not X-Forwarded-For or Forwarded", ci.Header)
	}
	parse := func(field string, list []string) []netip.Prefix {
		var out []netip.Prefix
		for i, v := range list {
			p, err := ParsePrefix(v)
			if err != nil {
				fail(fmt.Sprintf("%s[%d]", field, i), "%v", err)
				continue
			}
			out = append(out, p)
		}
		return out
	}
	s.clientIP.Trusted = parse("client_ip.trusted_proxies", ci.TrustedProxies)
	s.allow = parse("access.allow", c.Access.Allow)
	s.deny = parse("access.deny", c.Access.Deny)

	names := map[string]int{}
	storeModes := map[ratekeeper.Limit]struct{ rule, mode string }{}
	for i := range c.Rules {
		rc := c.Rules[i]
		at := fmt.Sprintf("rules[%d]", i)
		rl := &Rule{Index: i, Name: rc.Name, Config: rc}
		if err := checkName(rc.Name); err != nil {
			fail(at+".name", "%v", err)
		} else if j, dup := names[rc.Name]; dup {
			fail(at+".name", "%q is already the name of rules[%d]", rc.Name, j)
		}
		names[rc.Name] = i

		conc := rc.Concurrency != nil
		if conc {
			buildConcurrency(at, rc, rl, fail)
		}
		l := limitOf(rc.Limit)
		if !conc { // buildConcurrency checked it: a concurrency rule has no limit
			checkLimit(at+".limit", rc.Limit, l, fail)
		}
		rl.Limit = l

		switch rc.Mode {
		case "", "enforce":
			rl.Mode = Enforce
		case "shadow":
			rl.Mode = Shadow
		case "queue":
			rl.Mode = Queue
			if l.Algorithm != ratekeeper.LeakyBucket && !conc {
				fail(at+".mode", "queue mode needs the leaky_bucket algorithm (the FIFO queue), not %q", l.Algorithm)
			}
		default:
			fail(at+".mode", "%q is not enforce, shadow or queue", rc.Mode)
		}
		if rc.MaxDelay < 0 {
			fail(at+".max_delay", "must not be negative")
		} else if rc.MaxDelay > 0 && rl.Mode != Queue {
			fail(at+".max_delay", "only queue mode waits; set mode: queue or remove max_delay")
		}
		rl.MaxDelay = time.Duration(rc.MaxDelay)
		switch rc.StoreMode {
		case "", "exact", "sync", "lease":
			rl.StoreMode = rc.StoreMode
			// The store tells limits apart by their value: two rules with
			// the same limit are decided in one mode.
			if rc.StoreMode != "" {
				if other, ok := storeModes[l]; ok && other.mode != rc.StoreMode {
					fail(at+".store_mode", "%q, but rule %q has the same limit with store_mode %q: give the two the same mode", rc.StoreMode, other.rule, other.mode)
				} else if !ok {
					storeModes[l] = struct{ rule, mode string }{rc.Name, rc.StoreMode}
				}
			}
		default:
			fail(at+".store_mode", "%q is not exact, sync or lease", rc.StoreMode)
		}

		var missing Missing
		switch rc.OnMissingKey {
		case "", "ip":
		case "skip":
			missing = MissingSkip
		case "shared":
			missing = MissingShared
		default:
			fail(at+".on_missing_key", "%q is not ip, skip or shared", rc.OnMissingKey)
		}
		key, kerrs := compileKey(rc.Key, missing, s.clientIP, rc.Match.StrictPath)
		for _, e := range kerrs {
			fail(fmt.Sprintf("%s.key[%d]", at, e.i), "%v", e.err)
		}
		rl.key = key
		m, merrs := compileMatch(rc.Match)
		for _, e := range merrs {
			fail(at+".match."+e.field, "%v", e.err)
		}
		rl.match = m
		rl.clientIP = s.clientIP
		rl.Refused = buildRefusal(at, rc.Refused, rl.Mode, fail)
		if conc {
			// A concurrency rule counts requests in flight: no rate to
			// charge a cost against, nor another limit to give a client.
			rl.Cost = Cost{Fixed: 1, Default: 1}
			for _, f := range []struct {
				field string
				set   bool
			}{{"cost", rc.Cost != (CostConfig{})}, {"overrides", len(rc.Overrides) > 0}, {"tiers", rc.Tiers.Header != "" || len(rc.Tiers.Limits) > 0}} {
				if f.set {
					fail(at+"."+f.field, "applies to rate limits, not to a concurrency rule")
				}
			}
		} else {
			rl.prefix = keyPrefix(rc.Name, l)
			buildAlts(at, rc, rl, s.clientIP, fail)
			rl.Cost = buildCost(at, rc, rl, fail)
		}
		for _, a := range rl.Alts {
			if rl.Mode == Queue && a.Limit.Algorithm != ratekeeper.LeakyBucket {
				fail(a.field+".algorithm", "queue mode needs the leaky_bucket algorithm (the FIFO queue), not %q", a.Limit.Algorithm)
			}
			if rc.StoreMode == "" {
				continue
			}
			if other, ok := storeModes[a.Limit]; ok && other.mode != rc.StoreMode {
				fail(a.field, "has the limit of rule %q, whose store_mode is %q, not %q: give the two the same mode", other.rule, other.mode, rc.StoreMode)
			} else if !ok {
				storeModes[a.Limit] = struct{ rule, mode string }{rc.Name, rc.StoreMode}
			}
		}
		s.Rules = append(s.Rules, rl)
	}
	s.index()
	return s, errs
}

// limitOf is the limit lc writes.
func limitOf(lc LimitConfig) ratekeeper.Limit {
	return ratekeeper.Limit{
		Algorithm:   ratekeeper.Algorithm(lc.Algorithm),
		Rate:        lc.Rate,
		Period:      time.Duration(lc.Period),
		Burst:       lc.Burst,
		Stagger:     lc.Stagger,
		LogRejected: lc.LogRejected,
	}
}

// checkLimit reports what is wrong with l, which lc (at field) writes.
func checkLimit(at string, lc LimitConfig, l ratekeeper.Limit, fail func(string, string, ...any)) {
	if err := l.Validate(); err != nil {
		fail(limitField(at, err), "%v", strings.TrimPrefix(err.Error(), "limit: "))
		return
	}
	// The library ignores what an algorithm does not use; a file that
	// sets it means something that will not happen.
	for _, f := range inapplicable(lc) {
		fail(at+"."+f.field, "only applies to %s, not %s", f.algorithms, l.Algorithm)
	}
}

// inapplicable lists the fields of a valid limit that its algorithm cannot
// use, each with the algorithms it applies to.
func inapplicable(lc LimitConfig) []struct{ field, algorithms string } {
	var out []struct{ field, algorithms string }
	a := ratekeeper.Algorithm(lc.Algorithm)
	if lc.Burst != 0 && a != ratekeeper.TokenBucket && a != ratekeeper.LeakyBucket {
		out = append(out, struct{ field, algorithms string }{"burst", "token_bucket and leaky_bucket"})
	}
	if lc.Stagger && a != ratekeeper.FixedWindow && a != ratekeeper.SlidingWindow {
		out = append(out, struct{ field, algorithms string }{"stagger", "fixed_window and sliding_window"})
	}
	if lc.LogRejected && a != ratekeeper.SlidingLog {
		out = append(out, struct{ field, algorithms string }{"log_rejected", "sliding_log"})
	}
	return out
}

// limitField names the field of the limit at at that an error from
// Limit.Validate is about.
func limitField(at string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "limit: ")
	switch {
	case strings.Contains(msg, "algorithm"):
		return at + ".algorithm"
	case strings.HasPrefix(msg, "burst"):
		return at + ".burst"
	case strings.HasPrefix(msg, "period"):
		return at + ".period"
	case strings.HasPrefix(msg, "rate"):
		return at + ".rate"
	}
	return at
}

// ParsePrefix reads a CIDR or a single address (as a /32 or /128).
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR like 10.0.0.0/8 or 2001:db8::/32", s)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", s)
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

type keyErr struct {
	i   int
	err error
}

// appendKey appends a request's key to dst, or reports false.
type appendKey func(dst []byte, v view, ip netip.Addr) ([]byte, bool)

// compileKey turns key parts into an appendKey. Parts are joined with '|'
// after each is bounded (appendPart): a part that would contain '|' is
// hashed, so no two different requests produce one key, and so is one with
// a brace, so that the store alone places keys on Redis Cluster. The path in a key is the form the
// rule matches (loose unless strict), and HEAD counts as GET, so that a
// client cannot spread one resource over many keys.
func compileKey(parts []string, missing Missing, ci ClientIP, strict bool) (appendKey, []keyErr) {
	var errs []keyErr
	var fs []appendKey
	pathOf := func(v view) string { return v.loose }
	if strict {
		pathOf = func(v view) string { return v.path }
	}
	str := func(f func(v view) string) appendKey {
		return func(dst []byte, v view, _ netip.Addr) ([]byte, bool) { return appendPart(dst, f(v)), true }
	}
	for i, p := range parts {
		kind, arg, _ := strings.Cut(p, ":")
		switch strings.ToLower(kind) {
		case "global":
			if len(parts) > 1 {
				errs = append(errs, keyErr{i, fmt.Errorf("global is one key for all: it cannot combine with %d other parts", len(parts)-1)})
			}
		case "ip":
			fs = append(fs, func(dst []byte, _ view, ip netip.Addr) ([]byte, bool) { return ci.AppendKey(dst, ip), true })
		case "route":
			fs = append(fs, func(dst []byte, v view, _ netip.Addr) ([]byte, bool) {
				return appendPart(append(appendPart(dst, v.counted()), ' '), pathOf(v)), true
			})
		case "path":
			fs = append(fs, str(pathOf))
		case "method":
			fs = append(fs, str(func(v view) string { return v.counted() }))
		case "host":
			fs = append(fs, str(func(v view) string { return v.host }))
		case "header":
			name := http.CanonicalHeaderKey(strings.TrimSpace(arg))
			if name == "" || !validHeaderName(name) {
				errs = append(errs, keyErr{i, fmt.Errorf("%q: header: needs a header name, like header:X-API-Key", p)})
				continue
			}
			if err := checkRuleHeader(name); err != nil {
				errs = append(errs, keyErr{i, err})
				continue
			}
			if name == "Host" {
				fs = append(fs, str(func(v view) string { return v.host }))
				continue
			}
			fs = append(fs, func(dst []byte, v view, ip netip.Addr) ([]byte, bool) {
				if vs := v.r.Header[name]; len(vs) > 0 && vs[0] != "" {
					return appendPart(append(dst, "h="...), vs[0]), true
				}
				switch missing {
				case MissingSkip:
					return dst, false
				case MissingShared:
					return append(dst, "missing"...), true
				}
				return ci.AppendKey(append(dst, "ip="...), ip), true
			})
		default:
			errs = append(errs, keyErr{i, fmt.Errorf("%q is not ip, header:NAME, route, path, method, host or global", p)})
		}
	}
	switch len(fs) {
	case 0:
		return func(dst []byte, _ view, _ netip.Addr) ([]byte, bool) { return dst, true }, errs
	case 1:
		return fs[0], errs
	}
	return func(dst []byte, v view, ip netip.Addr) ([]byte, bool) {
		for i, f := range fs {
			if i > 0 {
				dst = append(dst, '|')
			}
			var ok bool
			if dst, ok = f(dst, v, ip); !ok {
				return dst, false
			}
		}
		return dst, true
	}, errs
}

// clientAddressHeaders name the client's address to upstreams that believe
// them, beside X-Forwarded-For and Forwarded (canonical names).
var clientAddressHeaders = [...]string{"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip"}

// ClientAddressHeaders returns the headers other than X-Forwarded-For and
// Forwarded that name the client's address to upstreams that believe them
// (X-Real-IP and its kin), in canonical form. Rules may not read them; the
// gateway passes them on from trusted proxies only.
func ClientAddressHeaders() []string { return clientAddressHeaders[:] }

// checkRuleHeader refuses a header that rules cannot see as the upstream
// does: a hop-by-hop header, which the gateway consumes (and net/http
// takes out of the request), and the forwarding headers, which any client
// can write (key: [ip] with client_ip.trusted_proxies reads them from the
// proxies that are trusted).
func checkRuleHeader(name string) error {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings", "Content-Length":
		return fmt.Errorf("%s is a hop-by-hop or framing header: the gateway consumes it, so a rule cannot see it as the upstream does", name)
	case "X-Forwarded-For", "Forwarded":
		return fmt.Errorf("%s is written by any client and dropped unless a trusted proxy sent it: use key: [ip] with client_ip.trusted_proxies, which believes it only from your proxies", name)
	case "X-Forwarded-Host", "X-Forwarded-Proto":
		return fmt.Errorf("%s is written by the gateway for the upstream: the client's is dropped", name)
	}
	if slices.Contains(clientAddressHeaders[:], name) {
		return fmt.Errorf("%s is written by any client and dropped unless a trusted proxy sent it: use key: [ip] with client_ip.trusted_proxies, which believes it only from your proxies", name)
	}
	if strings.Contains(name, "_") {
		return fmt.Errorf("%s has an underscore: the gateway drops such headers (as nginx does), since CGI-style servers read them as the dashed name", name)
	}
	return nil
}

// appendPart appends v bounded: as written if short and free of the
// separator and of braces, else hashed. A brace could make a hash tag,
// which would let a client choose its key's Redis Cluster slot.
func appendPart(dst []byte, v string) []byte {
	if len(v) <= maxPart && strings.IndexAny(v, "|{}") < 0 && (v == "" || v[0] != '#') {
		return append(dst, v...)
	}
	sum := sha256.Sum256([]byte(v))
	dst = append(dst, '#')
	return hex.AppendEncode(dst, sum[:16])
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

type matchErr struct {
	field string
	err   error
}

// compileMatch turns the conditions into one function, cheapest checks
// first. Paths, methods and hosts are compared in the forms the view holds
// (see path.go).
func compileMatch(m MatchConfig) (func(view) bool, []matchErr) {
	var conds []func(view) bool
	var errs []matchErr
	for _, compile := range []func(MatchConfig) ([]func(view) bool, []matchErr){
		compilePath, compileMethods, compileHosts, compileHeaders,
	} {
		c, e := compile(m)
		conds, errs = append(conds, c...), append(errs, e...)
	}
	switch len(conds) {
	case 0:
		return matchAll, errs
	case 1:
		return conds[0], errs
	}
	return func(v view) bool {
		for _, c := range conds {
			if !c(v) {
				return false
			}
		}
		return true
	}, errs
}

// compilePath turns match.path or match.path_prefix into a condition.
func compilePath(m MatchConfig) (conds []func(view) bool, errs []matchErr) {
	pathOf := func(v view) string { return v.loose }
	form := loosePath
	if m.StrictPath {
		pathOf = func(v view) string { return v.path }
		form = func(p string) string { return p }
	}
	if m.Path != "" {
		if !strings.HasPrefix(m.Path, "/") {
			errs = append(errs, matchErr{"path", fmt.Errorf("%q must start with /", m.Path)})
		}
		if m.PathPrefix != "" {
			errs = append(errs, matchErr{"path_prefix", fmt.Errorf("give path or path_prefix, not both")})
		}
		path := form(cleanPath(m.Path))
		conds = append(conds, func(v view) bool { return pathOf(v) == path })
	} else if m.PathPrefix != "" {
		if !strings.HasPrefix(m.PathPrefix, "/") {
			errs = append(errs, matchErr{"path_prefix", fmt.Errorf("%q must start with /", m.PathPrefix)})
		}
		pre := strings.TrimSuffix(form(cleanPath(m.PathPrefix)), "/")
		if pre != "" {
			conds = append(conds, func(v view) bool {
				p := pathOf(v)
				return strings.HasPrefix(p, pre) && (len(p) == len(pre) || p[len(pre)] == '/')
			})
		}
	}
	return conds, errs
}

// compileMethods turns match.methods into a condition.
func compileMethods(m MatchConfig) (conds []func(view) bool, errs []matchErr) {
	if len(m.Methods) == 0 {
		return nil, nil
	}
	methods := make([]string, 0, len(m.Methods)+1)
	for i, v := range m.Methods {
		v = strings.ToUpper(strings.TrimSpace(v))
		if v == "" || !validHeaderName(v) {
			errs = append(errs, matchErr{fmt.Sprintf("methods[%d]", i), fmt.Errorf("%q is not an HTTP method", m.Methods[i])})
		}
		methods = append(methods, v)
	}
	if slices.Contains(methods, http.MethodGet) && !slices.Contains(methods, http.MethodHead) {
		methods = append(methods, http.MethodHead) // frameworks run GET's handler for HEAD
	}
	// A POST that asks to be served as another method (a method
	// override) falls under the rules of either.
	return []func(view) bool{func(v view) bool {
		return slices.Contains(methods, v.method) || v.override != "" && slices.Contains(methods, v.override)
	}}, errs
}

// compileHosts turns match.hosts into a condition.
func compileHosts(m MatchConfig) (conds []func(view) bool, errs []matchErr) {
	if len(m.Hosts) == 0 {
		return nil, nil
	}
	var exact, suffixes []string
	for i, h := range m.Hosts {
		h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		switch {
		case h == "" || strings.ContainsAny(h, "/ :"):
			errs = append(errs, matchErr{fmt.Sprintf("hosts[%d]", i), fmt.Errorf("%q is not a host name (no port, no scheme)", m.Hosts[i])})
		case strings.HasPrefix(h, "*."):
			suffixes = append(suffixes, h[1:])
		default:
			exact = append(exact, h)
		}
	}
	return []func(view) bool{func(v view) bool {
		if slices.Contains(exact, v.host) {
			return true
		}
		for _, s := range suffixes {
			if len(v.host) > len(s) && strings.HasSuffix(v.host, s) {
				return true
			}
		}
		return false
	}}, errs
}

// compileHeaders turns match.headers and match.absent_headers into
// conditions.
func compileHeaders(m MatchConfig) (conds []func(view) bool, errs []matchErr) {
	for name, want := range m.Headers {
		if !validHeaderName(name) || name == "" {
			errs = append(errs, matchErr{"headers." + name, fmt.Errorf("%q is not a header name", name)})
			continue
		}
		name := http.CanonicalHeaderKey(name)
		if err := checkRuleHeader(name); err != nil {
			errs = append(errs, matchErr{"headers." + name, err})
			continue
		}
		switch {
		case name == "Host" && want == "*":
			conds = append(conds, func(v view) bool { return v.host != "" })
		case name == "Host":
			// Host is the request's host, on every path (net/http keeps it
			// out of the header map): compared as hosts are.
			host := canonicalHost(want)
			conds = append(conds, func(v view) bool { return v.host == host })
		case want == "*":
			conds = append(conds, func(v view) bool { return len(v.r.Header[name]) > 0 })
		default:
			conds = append(conds, func(v view) bool { return v.r.Header.Get(name) == want })
		}
	}
	for _, name := range m.AbsentHeaders {
		field := "absent_headers." + name
		if !validHeaderName(name) || name == "" {
			errs = append(errs, matchErr{field, fmt.Errorf("%q is not a header name", name)})
			continue
		}
		name := http.CanonicalHeaderKey(name)
		if err := checkRuleHeader(name); err != nil {
			errs = append(errs, matchErr{field, err})
			continue
		}
		if name == "Host" {
			errs = append(errs, matchErr{field, errors.New("every request has a host")})
			continue
		}
		if hasHeaderFold(m.Headers, name) {
			errs = append(errs, matchErr{field, errors.New("headers names it too: a header cannot be both present and absent")})
			continue
		}
		conds = append(conds, func(v view) bool { return v.r.Header.Get(name) == "" })
	}
	return conds, errs
}

// hasHeaderFold reports whether m names the header canonical in any case.
func hasHeaderFold(m map[string]string, canonical string) bool {
	for k := range m {
		if http.CanonicalHeaderKey(k) == canonical {
			return true
		}
	}
	return false
}

// hostOnly strips a port from a Host header.
func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}
