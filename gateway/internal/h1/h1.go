package h1

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// The request side is deliberately narrow. ParseRequest accepts a head only
// when every byte of it is in a form that net/http reads the same way. It
// says "hand off" for anything else. That is other versions, absolute or
// odd targets, bare LF, folded or invalid lines, Transfer-Encoding,
// Upgrade, Expect, TE, and Trailer. So is a Connection header naming
// anything but close or keep-alive, and a repeated or odd Host or
// Content-Length. Handing off is always safe: net/http then reads the very
// same bytes. So the two readers can never disagree on where a request
// ends, which request smuggling needs. FuzzParseRequest checks that every
// head the fast path takes, net/http takes too. It checks they read the
// same method, target, host, length and header values.

// ParseResult is what ParseRequest made of the bytes it was given.
type ParseResult int

const (
	Parsed   ParseResult = iota // a head the fast path serves
	NeedMore                    // a plain head so far, but not all of it
	HandOff                     // net/http must read this connection
)

// Span is a byte range of a buffer.
type Span struct{ Start, End int }

// ReqHead is a client's request head, as ParseRequest found it. Its spans
// and byte slices point into the buffer it parsed. Its zero value is ready
// to use, and a ReqHead is reused from one request to the next.
type ReqHead struct {
	N      int    // bytes of the head, the blank line included
	Method string // interned for the usual methods
	Target []byte // the request-target as sent (origin form)
	Path   []byte // its path, still escaped
	Host   []byte
	// ContentLength is the body's length, 0 without one; never over
	// MaxBody.
	ContentLength int
	Close         bool // Connection: close
	// Lines are the header lines forwarded as they are (each with its
	// CRLF): all but the hop-by-hop ones, Host and the forwarding headers,
	// which the proxy writes itself.
	Lines []Span
	// XFF are the X-Forwarded-For values, to pass on when the peer is a
	// trusted proxy.
	XFF []Span
	// IPLines are the lines of the other headers that name the client's
	// address (X-Real-IP and its kin), passed on from a trusted proxy only.
	IPLines []Span
	// Want holds, per name the rules read, the spans of that header's
	// values (OWS trimmed), in order; none of a hop-by-hop header, which
	// the upstream never receives.
	Want [][]Span
}

func (h *ReqHead) reset(nwant int) {
	h.N, h.ContentLength, h.Close = 0, 0, false
	h.Method, h.Target, h.Path, h.Host = "", nil, nil, nil
	h.Lines = h.Lines[:0]
	h.XFF = h.XFF[:0]
	h.IPLines = h.IPLines[:0]
	if cap(h.Want) < nwant {
		h.Want = make([][]Span, nwant)
	}
	h.Want = h.Want[:nwant]
	for i := range h.Want {
		h.Want[i] = h.Want[i][:0]
	}
}

// MaxBody is the largest request body ParseRequest takes; a longer one is
// handed off. The fast path reads a request's head and body from one
// buffer of this size.
const MaxBody = 4 << 10

// alnumAnd marks letters, digits and the bytes of extra.
func alnumAnd(extra string) (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range extra {
		t[c] = true
	}
	return t
}

// HasName reports whether the header line is the field named lower (in
// lower case), in any case.
func HasName(line []byte, lower string) bool {
	return len(line) > len(lower) && line[len(lower)] == ':' && EqualFoldASCII(line[:len(lower)], lower)
}

// EqualFoldASCII reports whether s is lower (in lower case) in any ASCII
// case. Other bytes compare as they are: "trailerſ" is no "trailers".
func EqualFoldASCII[T string | []byte](s T, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// TrimEOL returns line without its line end (CRLF or LF).
func TrimEOL(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b
}

// lowerName writes name in lower case into buf, if it fits, for a switch
// over the header names the fast path treats apart.
func lowerName(buf *[24]byte, name []byte) ([]byte, bool) {
	if len(name) > len(buf) {
		return nil, false
	}
	for k, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[k] = c
	}
	return buf[:len(name)], true
}

// isClientIPHeader reports whether the lower-case name is one of the
// headers that name the client's address (rules.ClientAddressHeaders),
// which ParseRequest sets apart. It is a switch, where a loop would cost
// every header line. TestClientIPHeadersAgree holds the two to one list.
func isClientIPHeader(lower string) bool {
	switch lower {
	case "x-real-ip", "true-client-ip", "x-client-ip", "client-ip", "x-cluster-client-ip", "cf-connecting-ip", "fastly-client-ip":
		return true
	}
	return false
}

// tokenChar marks the bytes of an RFC 9110 token.
var tokenChar = alnumAnd("!#$%&'*+-.^_`|~")

// IsToken reports whether s is an RFC 9110 token, as a method or a header
// name must be.
func IsToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenChar[s[i]] {
			return false
		}
	}
	return len(s) > 0
}

// targetChar marks the bytes the fast path takes in a request-target:
// those that net/url keeps as sent when it rebuilds the target (so the
// upstream sees exactly the client's bytes), '#' excluded.
var targetChar = func() (t [256]bool) {
	for c := 0x21; c < 0x7f; c++ {
		t[c] = true
	}
	for _, c := range "#\"<>\\^`{|}" {
		t[c] = false
	}
	return t
}()

// hostChar marks the bytes the fast path takes in a Host header: names,
// IPv4 and bracketed IPv6 addresses, ports.
var hostChar = alnumAnd("-._:[]")

// ValidHost reports whether h is a Host an upstream reads one way: a name
// or IPv4 address, or a bracketed IPv6 address, with an optional numeric
// port; empty (HTTP/1.0) too. A comma or a second colon is not.
func ValidHost[T string | []byte](h T) bool {
	if len(h) == 0 {
		return true
	}
	var host, port T
	if h[0] == '[' {
		end := 0
		for end < len(h) && h[end] != ']' {
			end++
		}
		if end == len(h) {
			return false
		}
		host, port = h[1:end], h[end+1:]
		for i := 0; i < len(host); i++ {
			if c := host[i]; !isHex(c) && c != ':' && c != '.' {
				return false
			}
		}
		if len(port) > 0 {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else {
		host = h
		for i := 0; i < len(h); i++ {
			if h[i] == ':' {
				host, port = h[:i], h[i+1:]
				break
			}
		}
		for i := 0; i < len(host); i++ {
			if !hostNameChar[host[i]] {
				return false
			}
		}
	}
	if len(host) == 0 || len(port) > 5 {
		return false
	}
	for i := 0; i < len(port); i++ {
		if !isDigit(port[i]) {
			return false
		}
	}
	return true
}

// hostNameChar marks the bytes of a host name or IPv4 address.
var hostNameChar = alnumAnd("-._~")

// fieldValueChar marks the bytes net/http accepts in a header value:
// visible ASCII, space, tab and obs-text.
var fieldValueChar = func() (t [256]bool) {
	for c := 0x20; c < 0x100; c++ {
		t[c] = c != 0x7f
	}
	t['\t'] = true
	return t
}()

// ParseRequest reads a request head from b, filling h. want are the
// canonical names of the headers whose values h.Want must hold.
func ParseRequest(b []byte, h *ReqHead, want []string) ParseResult {
	h.reset(len(want))
	// The request line.
	eol := bytes.IndexByte(b, '\n')
	if eol < 0 {
		return NeedMore
	}
	if eol == 0 || b[eol-1] != '\r' {
		return HandOff
	}
	line := b[:eol-1]
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return HandOff
	}
	for _, c := range line[:sp1] {
		if !tokenChar[c] {
			return HandOff
		}
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 || string(rest[sp2+1:]) != "HTTP/1.1" {
		return HandOff
	}
	target := rest[:sp2]
	if target[0] != '/' {
		return HandOff // absolute form, authority form (CONNECT), asterisk
	}
	for _, c := range target {
		if !targetChar[c] {
			return HandOff
		}
	}
	h.Method = internMethod(line[:sp1])
	if h.Method == http.MethodConnect {
		return HandOff
	}
	h.Target = target
	h.Path = target
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		h.Path = target[:q]
		if !plainQuery(target[q+1:]) {
			return HandOff // ReverseProxy rewrites such a query
		}
	}
	if !validEscapes(h.Path) {
		return HandOff // net/http answers 400
	}
	// The header lines.
	i := eol + 1
	hosts := 0
	var clen []byte
	for {
		rel := bytes.IndexByte(b[i:], '\n')
		if rel < 0 {
			return NeedMore
		}
		end := i + rel // the LF
		if rel == 0 || b[end-1] != '\r' {
			return HandOff
		}
		line := b[i : end-1]
		if len(line) == 0 {
			h.N = end + 1
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return HandOff // no name, a folded line, or no colon
		}
		name := line[:colon]
		for _, c := range name {
			if !tokenChar[c] {
				return HandOff
			}
		}
		vs, ve := colon+1, len(line)
		for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
			vs++
		}
		for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
			ve--
		}
		value := line[vs:ve]
		for _, c := range value {
			if !fieldValueChar[c] {
				return HandOff
			}
		}
		forward := true
		if bytes.IndexByte(name, '_') >= 0 {
			// Dropped, as nginx drops it: CGI-style servers read X_User_ID
			// as X-User-ID, which the rules never saw.
			i = end + 1
			continue
		}
		var buf [24]byte
		if lower, ok := lowerName(&buf, name); ok {
			switch string(lower) {
			case "host":
				hosts++
				if hosts > 1 || len(value) == 0 {
					return HandOff
				}
				for _, c := range value {
					if !hostChar[c] {
						return HandOff
					}
				}
				if !ValidHost(value) {
					return HandOff // net/http's path answers 400
				}
				h.Host = value
				forward = false
			case "content-length":
				if clen != nil || len(value) == 0 || len(value) > 5 {
					return HandOff
				}
				for _, c := range value {
					if c < '0' || c > '9' {
						return HandOff
					}
				}
				clen = value
			case "connection":
				for tok := range strings.SplitSeq(string(value), ",") {
					switch strings.ToLower(strings.TrimSpace(tok)) {
					case "close":
						h.Close = true
					case "keep-alive":
					default:
						return HandOff
					}
				}
				forward = false
			case "transfer-encoding", "upgrade", "expect", "te", "trailer":
				return HandOff
			case "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "http2-settings":
				// Hop-by-hop: the upstream never receives it, so no rule
				// may read it either.
				i = end + 1
				continue
			case "forwarded", "x-forwarded-host", "x-forwarded-proto":
				forward = false
			case "x-forwarded-for":
				h.XFF = append(h.XFF, Span{i + vs, i + ve})
				forward = false
			default:
				if isClientIPHeader(string(lower)) {
					h.IPLines = append(h.IPLines, Span{i, end + 1})
					forward = false
				}
			}
		}
		for k, w := range want {
			if len(w) == len(name) && strings.EqualFold(w, string(name)) {
				h.Want[k] = append(h.Want[k], Span{i + vs, i + ve})
			}
		}
		if forward {
			h.Lines = append(h.Lines, Span{i, end + 1})
		}
		i = end + 1
	}
	if hosts != 1 {
		return HandOff
	}
	if clen != nil {
		n, _ := strconv.Atoi(string(clen))
		if n > MaxBody {
			return HandOff
		}
		h.ContentLength = n
	}
	return Parsed
}

// plainQuery reports whether ReverseProxy passes the query q on as it is:
// it re-encodes (and so reorders, or drops parts of) a query with a
// semicolon or a malformed percent escape.
func plainQuery(q []byte) bool {
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return false
			}
		}
	}
	return true
}

// internMethod returns the usual methods without allocating.
func internMethod(m []byte) string {
	switch string(m) {
	case "GET":
		return http.MethodGet
	case "POST":
		return http.MethodPost
	case "PUT":
		return http.MethodPut
	case "DELETE":
		return http.MethodDelete
	case "PATCH":
		return http.MethodPatch
	case "HEAD":
		return http.MethodHead
	case "OPTIONS":
		return http.MethodOptions
	case "CONNECT":
		return http.MethodConnect
	}
	return string(m)
}

// validEscapes reports whether every '%' in p starts an escape.
func validEscapes(p []byte) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '%' {
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// RespHead is an upstream response head, as ParseResponse found it. Its
// spans point into the buffer it parsed.
type RespHead struct {
	Code int
	old  bool // HTTP/1.0: keep-alive keeps the connection open
	// ContentLength is -1 without one; with Chunked, it does not frame
	// the body.
	ContentLength int64
	// ContentLengthSpan is the Content-Length value, as the upstream wrote
	// it.
	ContentLengthSpan Span
	Chunked           bool
	Close             bool // the upstream will close: Connection: close, or HTTP/1.0
	HasDate           bool
	Trailer           bool     // a Trailer header (kept only with a chunked body)
	Lines             []Span   // the lines to pass on (see Dropped, too)
	drop              []string // lower-case names the Connection header lists
}

// Errors of an upstream's response that the fast path cannot pass on.
var (
	ErrBadResponse = errors.New("malformed HTTP response from the upstream")
	ErrBadChunk    = errors.New("malformed chunked body from the upstream")
)

// ParseResponse reads the response head in b, which ends with its blank
// line, into h, as net/http's client reads it.
func ParseResponse(b []byte, h *RespHead) error {
	*h = RespHead{ContentLength: -1, Lines: h.Lines[:0], drop: h.drop[:0]}
	eol := bytes.IndexByte(b, '\n')
	if eol < 0 {
		return ErrBadResponse
	}
	line := bytes.TrimSuffix(b[:eol], []byte{'\r'})
	if len(line) < 9 || string(line[:5]) != "HTTP/" || !isDigit(line[5]) || line[6] != '.' || !isDigit(line[7]) || line[8] != ' ' {
		return ErrBadResponse
	}
	status := line[9:]
	for len(status) > 0 && status[0] == ' ' {
		status = status[1:] // net/http's client skips them
	}
	if len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return ErrBadResponse
	}
	// Any HTTP/d.d, as net/http's client takes it: before 1.0 the
	// upstream closes, 1.0 closes unless keep-alive, later ones keep open.
	major, minor := line[5]-'0', line[7]-'0'
	h.Close = major == 0 || major == 1 && minor == 0
	// Before HTTP/1.1, net/http's client ignores Transfer-Encoding.
	ignoreTE := h.Close
	h.old = major == 1 && minor == 0
	code := 0
	for _, c := range status[:3] {
		if c < '0' || c > '9' {
			return ErrBadResponse
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 {
		return ErrBadResponse
	}
	h.Code = code
	i := eol + 1
	var te []byte
	hasTE, badTrailer := false, false
	for i < len(b) {
		rel := bytes.IndexByte(b[i:], '\n')
		if rel < 0 {
			return ErrBadResponse
		}
		end := i + rel
		line := bytes.TrimSuffix(b[i:end], []byte{'\r'})
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return ErrBadResponse
		}
		name := line[:colon]
		spaced := false
		for _, c := range name {
			if !tokenChar[c] {
				// net/http's client takes a name with spaces in it (not
				// first) as a name of no meaning, which its server then
				// does not send: the line is dropped.
				if c != ' ' || name[0] == ' ' {
					return ErrBadResponse
				}
				spaced = true
			}
		}
		value := bytes.Trim(line[colon+1:], " \t")
		for _, c := range value {
			if !fieldValueChar[c] {
				return ErrBadResponse
			}
		}
		if spaced {
			i = end + 1
			continue
		}
		keep := true
		var buf [24]byte
		if lower, ok := lowerName(&buf, name); ok {
			switch string(lower) {
			case "content-length":
				n, err := strconv.ParseInt(string(value), 10, 64)
				if err != nil || n < 0 || value[0] == '+' || h.ContentLength >= 0 && h.ContentLength != n {
					return ErrBadResponse
				}
				h.ContentLength = n
				if h.ContentLengthSpan == (Span{}) {
					vs := i + colon + 1 + bytes.Index(line[colon+1:], value)
					h.ContentLengthSpan = Span{vs, vs + len(value)}
				}
				keep = false // written again below, if it frames the body
			case "transfer-encoding":
				if hasTE && !ignoreTE {
					return ErrBadResponse
				}
				te, hasTE = value, !ignoreTE
				keep = false
			case "connection":
				for tok := range strings.SplitSeq(string(value), ",") {
					tok = strings.ToLower(strings.TrimSpace(tok))
					switch tok {
					case "close":
						h.Close = true
					case "keep-alive":
						if h.old {
							h.Close = false
						}
					case "":
					default:
						h.drop = append(h.drop, tok)
					}
				}
				keep = false
			case "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "upgrade":
				keep = false
			case "trailer":
				// As net/http's client reads it with a chunked body: a list
				// of names, where some names are refused, and an empty
				// list is no list.
				named := false
				for tok := range strings.SplitSeq(string(value), ",") {
					switch http.CanonicalHeaderKey(strings.Trim(tok, " \t")) {
					case "":
					case "Transfer-Encoding", "Trailer", "Content-Length":
						badTrailer, named = true, true
					default:
						named = true
					}
				}
				h.Trailer = h.Trailer || named
				keep = named
			case "date":
				h.HasDate = true
			}
		}
		if keep {
			h.Lines = append(h.Lines, Span{i, end + 1})
		}
		i = end + 1
	}
	if hasTE {
		if !strings.EqualFold(string(te), "chunked") {
			return ErrBadResponse // what Go's client refuses too
		}
		h.Chunked = true // ContentLength stays: a HEAD's answer passes it on, as net/http does
		if badTrailer {
			return ErrBadResponse
		}
	}
	return nil
}

// Dropped reports whether the response line at s names a header that the
// Connection header listed.
func (h *RespHead) Dropped(b []byte, s Span) bool {
	if len(h.drop) == 0 {
		return false
	}
	line := b[s.Start:s.End]
	name := line[:bytes.IndexByte(line, ':')]
	for _, d := range h.drop {
		if strings.EqualFold(d, string(name)) {
			return true
		}
	}
	return false
}

// Bodyless reports whether a response to method with code has no body,
// whatever its headers say.
func Bodyless(method string, code int) bool {
	return method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified || code < 200
}
