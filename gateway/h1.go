package gateway

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// This file reads the HTTP/1.1 messages of the fast path (front.go): client
// requests, which it takes only when they are plain, and upstream responses,
// which it must take whatever they are.
//
// The request side is deliberately narrow. parseRequest accepts a head only
// when every byte of it is in a form that net/http reads the same way, and
// says "hand off" for anything else: other versions, absolute or odd
// targets, bare LF, folded or invalid lines, Transfer-Encoding, Upgrade,
// Expect, TE, Trailer, a Connection header naming anything but close or
// keep-alive, repeated or odd Host and Content-Length. Handing off is always
// safe: net/http then reads the very same bytes. So the two readers can
// never disagree on where a request ends (request smuggling needs exactly
// that), and FuzzParseRequest checks that every head the fast path takes,
// net/http takes too, with the same method, target, host, length and
// header values.

// parseResult is what parseRequest made of the bytes it was given.
type parseResult int

const (
	parsed   parseResult = iota // a head the fast path serves
	needMore                    // a plain head so far, but not all of it
	handOff                     // net/http must read this connection
)

// span is a byte range of a buffer.
type span struct{ start, end int }

// reqHead is a client's request head, as parseRequest found it. Its spans
// and byte slices point into the buffer it parsed.
type reqHead struct {
	n      int    // bytes of the head, the blank line included
	method string // interned for the usual methods
	target []byte // the request-target as sent (origin form)
	path   []byte // its path, still escaped
	host   []byte
	clen   int  // Content-Length, 0 without one
	close  bool // Connection: close
	// lines are the header lines forwarded as they are (each with its
	// CRLF): all but the hop-by-hop ones, Host and the forwarding headers,
	// which the proxy writes itself.
	lines []span
	// xff are the X-Forwarded-For values, to pass on when the peer is a
	// trusted proxy.
	xff []span
	// ipLines are the lines of the other headers that name the client's
	// address (X-Real-IP and its kin), passed on from a trusted proxy only.
	ipLines []span
	// want holds, per name the rules read, the spans of that header's
	// values (OWS trimmed), in order.
	want [][]span
}

func (h *reqHead) reset(nwant int) {
	h.n, h.clen, h.close = 0, 0, false
	h.method, h.target, h.path, h.host = "", nil, nil, nil
	h.lines = h.lines[:0]
	h.xff = h.xff[:0]
	h.ipLines = h.ipLines[:0]
	if cap(h.want) < nwant {
		h.want = make([][]span, nwant)
	}
	h.want = h.want[:nwant]
	for i := range h.want {
		h.want[i] = h.want[i][:0]
	}
}

// frontReadBuffer is the size of a client connection's read buffer. The
// fast path takes a request only when its head and body fit in it.
const frontReadBuffer = 4 << 10

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

// tokenChar marks the bytes of an RFC 9110 token.
var tokenChar = alnumAnd("!#$%&'*+-.^_`|~")

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

// fieldValueChar marks the bytes net/http accepts in a header value:
// visible ASCII, space, tab and obs-text.
var fieldValueChar = func() (t [256]bool) {
	for c := 0x20; c < 0x100; c++ {
		t[c] = c != 0x7f
	}
	t['\t'] = true
	return t
}()

// parseRequest reads a request head from b, filling h. want are the
// canonical names of the headers whose values h.want must hold.
func parseRequest(b []byte, h *reqHead, want []string) parseResult {
	h.reset(len(want))
	// The request line.
	eol := bytes.IndexByte(b, '\n')
	if eol < 0 {
		return needMore
	}
	if eol == 0 || b[eol-1] != '\r' {
		return handOff
	}
	line := b[:eol-1]
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return handOff
	}
	for _, c := range line[:sp1] {
		if !tokenChar[c] {
			return handOff
		}
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 || string(rest[sp2+1:]) != "HTTP/1.1" {
		return handOff
	}
	target := rest[:sp2]
	if target[0] != '/' {
		return handOff // absolute form, authority form (CONNECT), asterisk
	}
	for _, c := range target {
		if !targetChar[c] {
			return handOff
		}
	}
	h.method = internMethod(line[:sp1])
	if h.method == http.MethodConnect {
		return handOff
	}
	h.target = target
	h.path = target
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		h.path = target[:q]
		if !plainQuery(target[q+1:]) {
			return handOff // ReverseProxy rewrites such a query
		}
	}
	if !validEscapes(h.path) {
		return handOff // net/http answers 400
	}
	// The header lines.
	i := eol + 1
	hosts := 0
	var clen []byte
	for {
		rel := bytes.IndexByte(b[i:], '\n')
		if rel < 0 {
			return needMore
		}
		end := i + rel // the LF
		if rel == 0 || b[end-1] != '\r' {
			return handOff
		}
		line := b[i : end-1]
		if len(line) == 0 {
			h.n = end + 1
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return handOff // no name, a folded line, or no colon
		}
		name := line[:colon]
		for _, c := range name {
			if !tokenChar[c] {
				return handOff
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
				return handOff
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
					return handOff
				}
				for _, c := range value {
					if !hostChar[c] {
						return handOff
					}
				}
				if !validHost(value) {
					return handOff // net/http's path answers 400
				}
				h.host = value
				forward = false
			case "content-length":
				if clen != nil || len(value) == 0 || len(value) > 5 {
					return handOff
				}
				for _, c := range value {
					if c < '0' || c > '9' {
						return handOff
					}
				}
				clen = value
			case "connection":
				for tok := range strings.SplitSeq(string(value), ",") {
					switch strings.ToLower(strings.TrimSpace(tok)) {
					case "close":
						h.close = true
					case "keep-alive":
					default:
						return handOff
					}
				}
				forward = false
			case "transfer-encoding", "upgrade", "expect", "te", "trailer":
				return handOff
			case "keep-alive", "proxy-connection", "proxy-authorization",
				"forwarded", "x-forwarded-host", "x-forwarded-proto", "http2-settings":
				forward = false
			case "x-forwarded-for":
				h.xff = append(h.xff, span{i + vs, i + ve})
				forward = false
			default:
				if isClientIPHeader(string(lower)) {
					h.ipLines = append(h.ipLines, span{i, end + 1})
					forward = false
				}
			}
		}
		for k, w := range want {
			if len(w) == len(name) && strings.EqualFold(w, string(name)) {
				h.want[k] = append(h.want[k], span{i + vs, i + ve})
			}
		}
		if forward {
			h.lines = append(h.lines, span{i, end + 1})
		}
		i = end + 1
	}
	if hosts != 1 {
		return handOff
	}
	if clen != nil {
		n, _ := strconv.Atoi(string(clen))
		if n > frontReadBuffer {
			return handOff
		}
		h.clen = n
	}
	return parsed
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

// respHead is an upstream response head, as readResponse found it.
type respHead struct {
	code    int
	old     bool  // HTTP/1.0: keep-alive keeps the connection open
	clen    int64 // -1: none; with chunked, it does not frame the body
	clenV   span  // the Content-Length value, as the upstream wrote it
	chunked bool
	close   bool // the upstream will close: Connection: close, or HTTP/1.0
	hasDate bool
	trailer bool // a Trailer header (kept only with a chunked body)
	lines   []span
	drop    []string // lower-case names the Connection header lists
}

var (
	errBadResponse = errors.New("malformed HTTP response from the upstream")
	errBadChunk    = errors.New("malformed chunked body from the upstream")
)

// parseResponse reads the response head in b (which ends with its blank
// line, as readHead leaves it).
func parseResponse(b []byte, h *respHead) error {
	*h = respHead{clen: -1, lines: h.lines[:0], drop: h.drop[:0]}
	eol := bytes.IndexByte(b, '\n')
	if eol < 0 {
		return errBadResponse
	}
	line := bytes.TrimSuffix(b[:eol], []byte{'\r'})
	if len(line) < 9 || string(line[:5]) != "HTTP/" || !isDigit(line[5]) || line[6] != '.' || !isDigit(line[7]) || line[8] != ' ' {
		return errBadResponse
	}
	status := line[9:]
	for len(status) > 0 && status[0] == ' ' {
		status = status[1:] // net/http's client skips them
	}
	if len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return errBadResponse
	}
	// Any HTTP/d.d, as net/http's client takes it: before 1.0 the
	// upstream closes, 1.0 closes unless keep-alive, later ones keep open.
	major, minor := line[5]-'0', line[7]-'0'
	h.close = major == 0 || major == 1 && minor == 0
	// Before HTTP/1.1, net/http's client ignores Transfer-Encoding.
	ignoreTE := h.close
	h.old = major == 1 && minor == 0
	code := 0
	for _, c := range status[:3] {
		if c < '0' || c > '9' {
			return errBadResponse
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 {
		return errBadResponse
	}
	h.code = code
	i := eol + 1
	var te []byte
	hasTE, badTrailer := false, false
	for i < len(b) {
		rel := bytes.IndexByte(b[i:], '\n')
		if rel < 0 {
			return errBadResponse
		}
		end := i + rel
		line := bytes.TrimSuffix(b[i:end], []byte{'\r'})
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return errBadResponse
		}
		name := line[:colon]
		spaced := false
		for _, c := range name {
			if !tokenChar[c] {
				// net/http's client takes a name with spaces in it (not
				// first) as a name of no meaning, which its server then
				// does not send: the line is dropped.
				if c != ' ' || name[0] == ' ' {
					return errBadResponse
				}
				spaced = true
			}
		}
		value := bytes.Trim(line[colon+1:], " \t")
		for _, c := range value {
			if !fieldValueChar[c] {
				return errBadResponse
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
				if err != nil || n < 0 || value[0] == '+' || h.clen >= 0 && h.clen != n {
					return errBadResponse
				}
				h.clen = n
				if h.clenV == (span{}) {
					vs := i + colon + 1 + bytes.Index(line[colon+1:], value)
					h.clenV = span{vs, vs + len(value)}
				}
				keep = false // written again below, if it frames the body
			case "transfer-encoding":
				if hasTE && !ignoreTE {
					return errBadResponse
				}
				te, hasTE = value, !ignoreTE
				keep = false
			case "connection":
				for tok := range strings.SplitSeq(string(value), ",") {
					tok = strings.ToLower(strings.TrimSpace(tok))
					switch tok {
					case "close":
						h.close = true
					case "keep-alive":
						if h.old {
							h.close = false
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
				h.trailer = h.trailer || named
				keep = named
			case "date":
				h.hasDate = true
			}
		}
		if keep {
			h.lines = append(h.lines, span{i, end + 1})
		}
		i = end + 1
	}
	if hasTE {
		if !strings.EqualFold(string(te), "chunked") {
			return errBadResponse // what Go's client refuses too
		}
		h.chunked = true // clen stays: a HEAD's answer passes it on, as net/http does
		if badTrailer {
			return errBadResponse
		}
	}
	return nil
}

// dropped reports whether the response line at s names a header that the
// Connection header listed.
func (h *respHead) dropped(b []byte, s span) bool {
	if len(h.drop) == 0 {
		return false
	}
	line := b[s.start:s.end]
	name := line[:bytes.IndexByte(line, ':')]
	for _, d := range h.drop {
		if strings.EqualFold(d, string(name)) {
			return true
		}
	}
	return false
}

// bodyless reports whether a response to method with code has no body,
// whatever its headers say.
func bodyless(method string, code int) bool {
	return method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified || code < 200
}
