package rules

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"/v1/posts", "/v1/posts", nil},
		{"/", "/", nil},
		{"/v1/posts/", "/v1/posts/", nil},
		{"/v1//posts", "/v1/posts", nil},
		{"//v1/posts", "/v1/posts", nil},
		{"/v1/posts//", "/v1/posts/", nil},
		{"/v1/./posts", "/v1/posts", nil},
		{"/v1/x/../posts", "/v1/posts", nil},
		{"/v1/%2e/posts", "/v1/posts", nil},
		{"/v1/%2E%2e/v1/posts", "/v1/posts", nil},
		{"/v1/.%2e/v1/posts", "/v1/posts", nil},
		{"/v1/post%73", "/v1/posts", nil},
		{"/v1/%7euser", "/v1/~user", nil},
		{"/v1/a%3bb", "/v1/a%3Bb", nil},
		{"/v1/caf%c3%a9", "/v1/caf%C3%A9", nil},
		{"/v1/posts/.", "/v1/posts/", nil},
		{"/v1/posts/..", "/v1/", nil},
		{"/.well-known/x", "/.well-known/x", nil},
		{"/v1/posts;jsessionid=1", "/v1/posts;jsessionid=1", nil},
		{"/a/..", "/", nil},
		{"/..", "", ErrAboveRoot},
		{"/a/../..", "", ErrAboveRoot},
		{"/%2e%2e/a", "", ErrAboveRoot},
		{"/v1/..;/admin", "", ErrDotParams},
		{"/v1/.;x/admin", "", ErrDotParams},
		{"/v1%2fposts", "", ErrEncodedSlash},
		{"/v1%5Cposts", "", ErrEncodedSlash},
		{`/v1\posts`, "", ErrEncodedSlash},
		{"/v1/%00", "", ErrNUL},
		{"/v1/%0a", "", ErrNUL},
		{"/v1/%zz", "", ErrBadEscape},
		{"/v1/%2", "", ErrBadEscape},
		{"*", "", ErrNotOrigin},
		{"", "", ErrNotOrigin},
		{"v1/posts", "", ErrNotOrigin},
	} {
		got, err := NormalizePath(c.in, false)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
	// With encoded slashes allowed, they stay encoded (in upper case), and
	// what they decode to must be canonical too.
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"/projects/group%2fname", "/projects/group%2Fname", nil},
		{"/a%5Cb", "/a%5Cb", nil},
		{"/v1/..%2Fadmin", "", ErrAmbiguous},
		{"/v1/%2F/x", "", ErrAmbiguous},
	} {
		got, err := NormalizePath(c.in, true)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("NormalizePath(%q, allow) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestLoosePath(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/posts":                "/v1/posts",
		"/v1/posts/":               "/v1/posts",
		"/V1/Posts":                "/v1/posts",
		"/v1/posts;jsessionid=x":   "/v1/posts",
		"/v1;a=b/posts;c/":         "/v1/posts",
		"/;x/v1/posts":             "/v1/posts",
		"/":                        "/",
		"/;x":                      "/",
		"/v1/posts;a/;b/;c/":       "/v1/posts",
		"/v1/posts%3Bnot-a-param/": "/v1/posts%3bnot-a-param",
	} {
		if got := loosePath(in); got != want {
			t.Errorf("loosePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzNormalizePath holds NormalizePath to what an upstream that decodes
// and resolves the path itself (as nginx does) would make of the same
// target: the same segments, and nothing left to normalize.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/v1/posts", "//a/./b/../c/", "/%2e%2E/x", "/a/%2fb", "/a;b/..;/c", "/%41%7e%25", "/a/b/.."} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, p string, allow bool) {
		got, err := NormalizePath(p, allow)
		if err != nil {
			return
		}
		if again, err := NormalizePath(got, allow); err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", p, got, again, err)
		}
		if strings.Contains(got, "//") || got[0] != '/' {
			t.Fatalf("%q -> %q: an empty segment", p, got)
		}
		for seg := range strings.SplitSeq(got, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q -> %q: a dot segment", p, got)
			}
		}
		// What a decoding upstream reads: the target decoded, then
		// resolved. Without encoded slashes, it is what the rules see.
		dec, err := url.PathUnescape(p)
		if err != nil {
			t.Fatalf("%q: accepted a path net/url cannot decode: %v", p, err)
		}
		want := path.Clean(dec)
		if strings.HasSuffix(dec, "/") || strings.HasSuffix(dec, "/.") || strings.HasSuffix(dec, "/..") {
			if want != "/" {
				want += "/"
			}
		}
		gotDec, err := url.PathUnescape(got)
		if err != nil {
			t.Fatalf("%q -> %q: cannot decode the result: %v", p, got, err)
		}
		if gotDec != want {
			t.Fatalf("%q -> %q (decoded %q); a decoding upstream reads %q", p, got, gotDec, want)
		}
		if cleanPath(gotDec) != gotDec {
			t.Fatalf("%q -> %q: decodes to %q, which is not clean", p, got, gotDec)
		}
	})
}

// TestRuleForms checks that a rule counts every form of its resource that
// common servers route to it, and no other resource.
func TestRuleForms(t *testing.T) {
	cfg, err := Parse("t.yaml", []byte(`
rules:
  - name: posts
    match: {methods: [POST], path: /v1/posts}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: reads
    match: {methods: [get], path_prefix: /v1/items}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: strict
    match: {path: /v1/Exact, strict_path: true}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: by-host
    match: {headers: {Host: API.example.com}}
    key: [header:Host]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	matched := func(method, target, host string) []string {
		r := httptest.NewRequest("GET", "/", nil)
		r.Method, r.Host = method, host
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatal(err)
		}
		r.URL = u
		var names []string
		for _, m := range set.Match(nil, r, netip.MustParseAddr("192.0.2.1")) {
			names = append(names, m.Rule.Name)
		}
		return names
	}
	for _, c := range []struct {
		method, target, host string
		want                 string
	}{
		{"POST", "/v1/posts", "x", "posts"},
		{"post", "/v1/posts", "x", "posts"},
		{"Post", "/v1/posts/", "x", "posts"},
		{"POST", "/V1/POSTS", "x", "posts"},
		{"POST", "/v1/posts;jsessionid=1", "x", "posts"},
		{"POST", "/v1;x/posts", "x", "posts"},
		{"POST", "//v1//posts", "x", "posts"},
		{"POST", "/v1/x/../posts", "x", "posts"},
		{"GET", "/v1/posts", "x", ""},
		{"POST", "/v1/posts/7", "x", ""},
		{"GET", "/v1/items/7", "x", "reads"},
		{"HEAD", "/v1/items/7", "x", "reads"},
		{"head", "/V1/Items", "x", "reads"},
		{"POST", "/v1/items", "x", ""},
		{"GET", "/v1/itemsX", "x", ""},
		{"GET", "/v1/Exact", "x", "strict"},
		{"GET", "/v1/exact", "x", ""},
		{"GET", "/v1/Exact/", "x", ""},
		{"GET", "/", "api.example.com", "by-host"},
		{"GET", "/", "API.Example.Com.:8080", "by-host"},
		{"GET", "/", "api.example.org", ""},
	} {
		got := strings.Join(matched(c.method, c.target, c.host), ",")
		if got != c.want {
			t.Errorf("%s %s (Host %s): matched %q, want %q", c.method, c.target, c.host, got, c.want)
		}
	}
	// One resource, one key, whatever the form.
	keyOf := func(rl *Rule, method, target string) string {
		r := httptest.NewRequest(method, target, nil)
		k, _ := rl.Key(r, netip.MustParseAddr("192.0.2.1"))
		return k
	}
	route, err := newSetFromYAML(`
rules:
  - name: per-route
    key: [route, host]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	if err != nil {
		t.Fatal(err)
	}
	rl := route.Rules[0]
	base := keyOf(rl, "GET", "/v1/items/7")
	for _, v := range [][2]string{{"HEAD", "/v1/items/7"}, {"get", "/v1/items/7/"}, {"GET", "/V1/Items/7;x"}, {"GET", "//v1/./items/7"}} {
		if k := keyOf(rl, v[0], v[1]); k != base {
			t.Errorf("%s %s: key %q, want %q", v[0], v[1], k, base)
		}
	}
}

func TestRuleHeadersRefused(t *testing.T) {
	for _, c := range []struct{ yaml, field string }{
		{"match: {headers: {Transfer-Encoding: chunked}}", "rules[0].match.headers.Transfer-Encoding"},
		{"match: {headers: {upgrade: h2c}}", "rules[0].match.headers.Upgrade"},
		{"key: [header:Connection]", "rules[0].key[0]"},
		{"key: [header:Proxy-Authorization]", "rules[0].key[0]"},
		{"match: {headers: {proxy-authenticate: x}}", "rules[0].match.headers.Proxy-Authenticate"},
		{"key: [header:x-forwarded-for]", "rules[0].key[0]"},
		{"key: [header:X-Real-IP]", "rules[0].key[0]"},
	} {
		_, err := Parse("t.yaml", []byte("rules:\n  - name: r\n    "+c.yaml+"\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n"))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v, want one naming %s", c.yaml, err, c.field)
		}
	}
}

// newSetFromYAML compiles a rules file given as text.
func newSetFromYAML(s string) (*Set, error) {
	cfg, err := Parse("t.yaml", []byte(s))
	if err != nil {
		return nil, err
	}
	return Compile(cfg)
}

// TestAbsentHeaders checks that a rule can cover the requests without a
// header (anonymous clients), by absent_headers or by the value "", and
// that a request with the header in any case of its name is not covered.
func TestAbsentHeaders(t *testing.T) {
	set, err := newSetFromYAML(`
rules:
  - name: anonymous
    match: {absent_headers: [x-api-key]}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: anonymous-by-empty-value
    match: {headers: {X-API-Key: ""}}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	if err != nil {
		t.Fatal(err)
	}
	if names, _ := set.HeadersRead(); !slices.Contains(names, "X-Api-Key") {
		t.Errorf("HeadersRead = %v, want X-Api-Key among them", names)
	}
	for _, c := range []struct {
		header []string // name, value pairs
		want   int
	}{
		{nil, 2},
		{[]string{"X-Api-Key", ""}, 2},
		{[]string{"X-Api-Key", "k1"}, 0},
		{[]string{"x-api-key", "k1"}, 0},
		{[]string{"X-Other", "k1"}, 2},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for i := 0; i < len(c.header); i += 2 {
			r.Header.Add(c.header[i], c.header[i+1])
		}
		if got := len(set.Match(nil, r, netip.MustParseAddr("192.0.2.1"))); got != c.want {
			t.Errorf("headers %q: %d rules match, want %d", c.header, got, c.want)
		}
	}
	for _, c := range []struct{ yaml, want string }{
		{"match: {absent_headers: [Host]}", "rules[0].match.absent_headers.Host: every request has a host"},
		{"match: {absent_headers: [X-A], headers: {x-a: v}}", "rules[0].match.absent_headers.X-A: headers names it too"},
		{"match: {absent_headers: [Connection]}", "rules[0].match.absent_headers.Connection"},
		{"match: {absent_headers: ['bad name']}", "rules[0].match.absent_headers.bad name"},
	} {
		_, err := Parse("t.yaml", []byte("rules:\n  - name: r\n    "+c.yaml+"\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.yaml, err, c.want)
		}
	}
}
