package rules

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
)

// What rules see of a request's path, method and host. A rule must count
// every request the API behind it acts on as its resource. So it matches a
// canonical form of each, the same whatever form the client chose.
//
// The path has slashes merged and dot segments resolved. NormalizePath is
// what the gateway forwards, so the upstream acts on the very path the
// rules saw.
//
// Unless a rule asks for strict_path, the path is also taken as common
// frameworks route it. ;params are dropped from every segment (servlet
// containers). A trailing slash is dropped (Express, Rails, Django's
// APPEND_SLASH). Letters are in lower case (Express, ASP.NET).
//
// The method is in upper case, and HEAD counts where GET is named. Flask,
// Go's ServeMux, Express and Django run the GET handler for HEAD.
//
// The host is in lower case, without a port or a trailing dot.

// Errors NormalizePath reports: the target is ambiguous, read one way by
// the rules and another by some upstream, so the gateway refuses it (400).
var (
	ErrNotOrigin    = errors.New("the target is not a path starting with /")
	ErrEncodedSlash = errors.New("the path has an encoded slash or backslash (%2F, %5C)")
	ErrBadEscape    = errors.New("the path has a % that starts no escape")
	ErrNUL          = errors.New("the path has an encoded NUL (%00) or control character")
	ErrAboveRoot    = errors.New("the path climbs above the root with a .. segment")
	ErrDotParams    = errors.New("the path has a dot segment with ;params (..;)")
	ErrAmbiguous    = errors.New("the path decodes to empty or dot segments")
)

// NormalizePath returns the canonical form of an escaped request path.
// Percent-escapes of unreserved characters are decoded, and the others put
// in upper case. Runs of slashes are merged into one. Dot segments (. and
// .., also escaped) are resolved. A trailing slash stays. It returns p
// itself when p is canonical already.
//
// It refuses what upstreams read in different ways: a bad escape, NUL or a
// control character, a dot segment with ;params, and a .. above the root.
// It refuses an encoded slash or backslash too, unless allowEncodedSlash
// (for APIs with identifiers that hold one). Those then stay encoded, and
// the path they decode to must be canonical too.
func NormalizePath(p string, allowEncodedSlash bool) (string, error) {
	if p == "" || p[0] != '/' {
		return "", ErrNotOrigin
	}
	if plainPath(p) {
		return p, nil
	}
	// First the escapes, into b.
	b := make([]byte, 0, len(p))
	encodedSlash := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || !isHexDigit(p[i+1]) || !isHexDigit(p[i+2]) {
				return "", ErrBadEscape
			}
			d := unhex(p[i+1])<<4 | unhex(p[i+2])
			switch {
			case unreserved(d):
				b = append(b, d)
			case d == '/' || d == '\\':
				if !allowEncodedSlash {
					return "", ErrEncodedSlash
				}
				encodedSlash = true
				b = append(b, '%', upperHex(p[i+1]), upperHex(p[i+2]))
			case d < 0x20 || d == 0x7f:
				return "", ErrNUL
			default:
				b = append(b, '%', upperHex(p[i+1]), upperHex(p[i+2]))
			}
			i += 2
		case c == '\\':
			return "", ErrEncodedSlash // a literal backslash: some servers read /
		case c < 0x20 || c == 0x7f:
			return "", ErrNUL
		default:
			b = append(b, c)
		}
	}
	out, err := resolveDots(b, true)
	if err != nil {
		return "", err
	}
	if encodedSlash {
		// The path as an upstream that decodes %2F reads it must mean the
		// same segments: no empty or dot segment may hide behind an escape.
		dec := strings.NewReplacer("%2F", "/", "%5C", "/").Replace(string(out))
		if d, err := resolveDots([]byte(dec), true); err != nil || string(d) != dec {
			return "", ErrAmbiguous
		}
	}
	if string(out) == p {
		return p, nil
	}
	return string(out), nil
}

// plainPath reports whether p is canonical at a glance: no escape, no
// backslash or control character, no empty segment and no segment that
// starts with a dot.
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%' || c == '\\' || c < 0x20 || c == 0x7f:
			return false
		case c == '/' && i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.'):
			return false
		}
	}
	return true
}

// resolveDots merges runs of slashes and resolves dot segments in b (a
// path starting with /), in place. Strict, it refuses a .. above the root
// and a dot segment with ;params; lenient, it stops at the root and takes
// ;params as part of a name.
func resolveDots(b []byte, strict bool) ([]byte, error) {
	out := b[:0] // writes never overtake reads
	for i := 0; i < len(b); {
		// b[i] is '/': the segment is b[i+1:j].
		j := i + 1
		for j < len(b) && b[j] != '/' {
			j++
		}
		seg := b[i+1 : j]
		last := j == len(b)
		name := seg
		if strict {
			// ;params, also escaped (%3B): servlet containers read
			// "..;x" as "..", and some decode first.
			if k := bytes.IndexByte(seg, ';'); k >= 0 {
				name = seg[:k]
			}
			if k := bytes.Index(seg, []byte("%3B")); k >= 0 && k < len(name) {
				name = seg[:k]
			}
		}
		switch {
		case len(seg) == 0 && !last:
			// An empty segment: merged into the next slash.
		case string(name) == "." || string(name) == "..":
			if len(name) != len(seg) {
				return nil, ErrDotParams
			}
			if len(name) == 2 {
				k := bytes.LastIndexByte(out, '/')
				if k < 0 && strict {
					return nil, ErrAboveRoot
				}
				out = out[:max(k, 0)]
			}
			if last {
				out = append(out, '/')
			}
		default:
			out = append(out, '/')
			out = append(out, seg...)
		}
		i = j
	}
	if len(out) == 0 {
		out = append(out, '/')
	}
	return out, nil
}

// cleanPath is a decoded path (http.Request's URL.Path) as rules compare
// it: runs of slashes merged and dot segments resolved (a .. above the
// root stays at the root). The gateway hands the rules a normalized path,
// for which this is a scan; the middleware in another server may see any.
func cleanPath(p string) string {
	if p != "" && p[0] == '/' && plainDecoded(p) {
		return p
	}
	b, _ := resolveDots(append([]byte{'/'}, p...), false)
	return string(b)
}

func plainDecoded(p string) bool {
	for i := 0; i+1 < len(p); i++ {
		if p[i] == '/' && (p[i+1] == '/' || p[i+1] == '.') {
			return false
		}
	}
	return true
}

// loosePath is the path as common frameworks route it: ;params dropped
// from every segment, a trailing slash dropped, ASCII letters in lower
// case. p is a cleaned path. The result is p itself when nothing changes.
func loosePath(p string) string {
	plain := true
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == ';' || 'A' <= c && c <= 'Z' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain && (len(p) <= 1 || p[len(p)-1] != '/') {
		return p
	}
	b := make([]byte, 0, len(p))
	inParams := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			inParams = false
			if len(b) > 0 && b[len(b)-1] == '/' {
				continue // a segment that was all params
			}
		case inParams:
			continue
		case c == ';':
			inParams = true
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	if hasHighByte(b) {
		b = []byte(asciiFolds.Replace(string(b)))
	}
	if bytes.Contains(b, []byte("/.")) {
		b, _ = resolveDots(b, false) // a segment that was "..;x"
	}
	if len(b) > 1 && b[len(b)-1] == '/' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return "/"
	}
	return string(b)
}

// asciiFolds are the non-ASCII letters whose case mapping (strings.ToLower,
// ToUpper or EqualFold, as upstreams route case-insensitively) is an ASCII
// letter: a path that spells "items" with one of them is "items".
var asciiFolds = strings.NewReplacer("\u0130", "i", "\u0131", "i", "\u017f", "s", "\u212a", "k")

func hasHighByte(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return true
		}
	}
	return false
}

// upperMethod is the method as rules compare it: in upper case.
func upperMethod(m string) string {
	for i := 0; i < len(m); i++ {
		if 'a' <= m[i] && m[i] <= 'z' {
			return strings.ToUpper(m)
		}
	}
	return m
}

// keyMethod is the method as keys count it: HEAD counts as GET.
func keyMethod(m string) string {
	if m == http.MethodHead {
		return http.MethodGet
	}
	return m
}

// canonicalHost is a Host header as rules compare it: lower case, without
// a port, brackets or a trailing dot.
func canonicalHost(h string) string {
	h = hostOnly(h)
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if 'A' <= h[i] && h[i] <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// view is what rules see of one request, built once per request.
type view struct {
	r        *http.Request
	method   string // upper case
	override string // a POST's method override, upper case; "" without
	path     string // cleaned (cleanPath)
	loose    string // loosePath(path)
	host     string // canonicalHost
}

func newView(r *http.Request) view {
	p := cleanPath(r.URL.Path)
	v := view{r: r, method: upperMethod(r.Method), path: p, loose: loosePath(p), host: canonicalHost(r.Host)}
	if v.method == http.MethodPost {
		v.override = methodOverride(r)
	}
	return v
}

// counted is the method a key counts: the override when it names a
// standard method (what frameworks that honour it run), HEAD as GET. Any
// other override is served as the POST it is, so it counts as one: a
// client cannot get a fresh key per made-up method.
func (v *view) counted() string {
	if standardMethod(v.override) {
		return keyMethod(v.override)
	}
	return keyMethod(v.method)
}

// standardMethod reports whether m, upper case, is one of HTTP's methods.
func standardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// methodOverride is the method a POST asks to be served as, by the
// headers and query parameter that Rails, Laravel, Symfony and Express's
// method-override honour; "" when it asks none.
func methodOverride(r *http.Request) string {
	for _, h := range [...]string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"} {
		if vs := r.Header[h]; len(vs) > 0 && vs[0] != "" {
			return upperMethod(strings.TrimSpace(vs[0]))
		}
	}
	if q := r.URL.RawQuery; strings.Contains(q, "_method=") {
		if m := r.URL.Query().Get("_method"); m != "" {
			return upperMethod(m)
		}
	}
	return ""
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
