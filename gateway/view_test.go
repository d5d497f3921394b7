package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
)

// routes says which handler of a lenient upstream a request reaches: one
// that decodes the whole target, reads \ as /, merges slashes, resolves
// dot segments, drops ;params and a trailing slash, ignores letter case,
// and serves HEAD with GET's handler (nginx, Express, servlet containers
// and Flask each do some of it). It is the oracle of the tests below: a
// request it routes to a limited resource must have been counted.
func routes(method, requestURI string) string {
	target := requestURI
	if i := strings.Index(target, "://"); i >= 0 {
		target = target[i+3:]
		if j := strings.IndexByte(target, '/'); j >= 0 {
			target = target[j:]
		} else {
			target = "/"
		}
	}
	if i := strings.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	dec, err := url.PathUnescape(target)
	if err != nil {
		return ""
	}
	var segs []string
	for seg := range strings.SplitSeq(strings.ReplaceAll(dec, `\`, "/"), "/") {
		seg, _, _ = strings.Cut(seg, ";")
		switch seg {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, strings.ToLower(seg))
		}
	}
	m := strings.ToUpper(method)
	if m == "HEAD" {
		m = "GET"
	}
	return m + " /" + strings.Join(segs, "/")
}

// limited are the resources the rules below protect, as routes names them.
func limited(route string) bool {
	return route == "POST /v1/posts" || route == "GET /v1/items" || strings.HasPrefix(route, "GET /v1/items/")
}

// limitRules allow one request to each limited resource an hour, with the
// key in the path's form, so that every form must share one counter.
const limitRules = `rules:
  - name: posts
    match: {methods: [POST], path: /v1/posts}
    key: [route]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: items
    match: {methods: [GET], path_prefix: /v1/items}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`

// routingUpstream records the requests that reached a limited resource.
type routingUpstream struct {
	url  string
	mu   sync.Mutex
	hits []string
}

func newRoutingUpstream(t testing.TB) *routingUpstream {
	u := &routingUpstream{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if rt := routes(r.Method, r.RequestURI); limited(rt) {
			u.mu.Lock()
			u.hits = append(u.hits, r.Method+" "+r.RequestURI+" -> "+rt)
			u.mu.Unlock()
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

func (u *routingUpstream) take() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	h := u.hits
	u.hits = nil
	return h
}

// overLimit starts a gateway on tr with limitRules and uses up both
// limits.
func overLimit(t testing.TB, tr via, up *routingUpstream) string {
	addr := startVia(t, tr, up.url, limitRules)
	useUp(t, up, rawSender(addr, "HTTP/1.1", ""))
	return addr
}

// useUp uses up both limits of limitRules, the first with sends[0], the
// second with the last of sends (one client over two protocols).
func useUp(t testing.TB, up *routingUpstream, sends ...sendFunc) {
	t.Helper()
	for i, v := range []struct{ method, target string }{{"POST", "/v1/posts"}, {"GET", "/v1/items"}} {
		if code := sends[min(i, len(sends)-1)](t, v.method, v.target); code != 200 {
			t.Fatalf("%s %s: %d, want 200", v.method, v.target, code)
		}
	}
	if n := len(up.take()); n != 2 {
		t.Fatalf("the upstream saw %d requests, want 2", n)
	}
}

// sendFunc sends a request for method and target, with Host gw.test (and
// an empty body with POST), in a way of its own, and returns the status
// of the answer: 0 when none came (an HTTP/2 stream the gateway reset).
type sendFunc func(t testing.TB, method, target string) int

// rawSender sends each request on a new connection to addr as proto, with
// extra header lines.
func rawSender(addr, proto, extra string) sendFunc {
	return exchangeSender(func(t testing.TB, raw string) (*http.Response, string) { return rawExchange(t, addr, raw) }, proto, extra)
}

// exchangeSender sends each request with exchange (rawExchange, or its
// TLS kin) as proto, with extra header lines.
func exchangeSender(exchange func(testing.TB, string) (*http.Response, string), proto, extra string) sendFunc {
	return func(t testing.TB, method, target string) int {
		t.Helper()
		body := ""
		if strings.EqualFold(method, "POST") {
			body = "Content-Length: 0\r\n"
		}
		resp, _ := exchange(t, method+" "+target+" "+proto+"\r\nHost: gw.test\r\n"+body+extra+"\r\n")
		return resp.StatusCode
	}
}

// pathForms are forms of the limited resources that lenient upstreams
// route to them (finding 2), with the methods' forms (3, 4).
var pathForms = []struct{ method, target string }{
	{"POST", "/v1//posts"}, {"POST", "//v1/posts"}, {"POST", "/v1/./posts"}, {"POST", "/v1/x/../posts"},
	{"POST", "/v1/%2e/posts"}, {"POST", "/v1/%2E%2E/v1/posts"}, {"POST", "/v1/post%73"}, {"POST", "/v1/posts/"},
	{"POST", "/v1/posts;jsessionid=1"}, {"POST", "/v1;x/posts"}, {"POST", "/V1/Posts"}, {"POST", "/v1/posts%3B"},
	{"POST", "/v1/..;/v1/posts"}, {"POST", "/v1%2fposts"}, {"POST", "/v1%5Cposts"}, {"POST", `/v1\posts`},
	{"POST", "/v1/posts?x=1"}, {"POST", "http://gw.test//v1/posts"},
	{"post", "/v1/posts"}, {"Post", "/v1/posts"}, {"pOST", "/v1//posts/"},
	{"GET", "/v1/items/7"}, {"HEAD", "/v1/items"}, {"head", "/v1/items/7"}, {"GET", "/V1/ITEMS/"}, {"Get", "/v1/./items"},
}

// forced are ways a client sends a request so that the fast path hands it
// to net/http: the rules must see it the same there.
var forced = []struct{ name, proto, extra string }{
	{"plain", "HTTP/1.1", ""},
	{"HTTP/1.0", "HTTP/1.0", ""},
	{"large head", "HTTP/1.1", "X-Pad: " + strings.Repeat("p", 5000) + "\r\n"},
}

// No form of a path or a method walks past a rule,
// on any transport, whether or not the fast path reads the request.
func TestRulesCountEveryFormOfAPath(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRoutingUpstream(t)
			addr := overLimit(t, tr, up)
			for _, f := range forced {
				countsEveryForm(t, up, f.name, rawSender(addr, f.proto, f.extra))
			}
		})
	}
}

// countsEveryForm sends each of pathForms with send to a gateway whose
// limitRules are used up: each must be refused (429, 400, or a reset
// HTTP/2 stream), and none may reach a limited resource.
func countsEveryForm(t *testing.T, up *routingUpstream, name string, send sendFunc) {
	t.Helper()
	for _, v := range pathForms {
		switch code := send(t, v.method, v.target); code {
		case http.StatusTooManyRequests, http.StatusBadRequest, 0:
		default:
			t.Errorf("%s %s (%s): %d, want 429 or 400", v.method, v.target, name, code)
		}
		if hits := up.take(); len(hits) > 0 {
			t.Errorf("%s %s (%s) reached the limited resource uncounted: %q", v.method, v.target, name, hits)
		}
	}
}

// hostRules allow one request an hour to the host api.example.com, named
// as a header.
const hostRules = `rules:
  - name: by-host-header
    match: {headers: {Host: api.example.com}}
    key: [header:Host]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`

// A rule on the Host header counts on every client path, not
// only on the fast path (net/http keeps Host out of the header map).
func TestHostRulesCountOnEveryPath(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, hostRules)
			if resp, _ := rawExchange(t, addr, "GET /a HTTP/1.1\r\nHost: api.example.com\r\n\r\n"); resp.StatusCode != 200 {
				t.Fatalf("first request: %s", resp.Status)
			}
			for _, req := range []string{
				"GET /a HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
				"GET /a HTTP/1.0\r\nHost: api.example.com\r\n\r\n",
				"GET /a HTTP/1.1\r\nHost: API.Example.com:8080\r\nX-Pad: " + strings.Repeat("p", 5000) + "\r\n\r\n",
				"POST /a HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
				"POST /a HTTP/1.1\r\nHost: api.example.com\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
				"GET http://api.example.com/a HTTP/1.1\r\nHost: elsewhere\r\n\r\n",
			} {
				if resp, _ := rawExchange(t, addr, req); resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("%.60q: %s, want 429", req, resp.Status)
				}
			}
			if n := len(up.take()); n != 1 {
				t.Errorf("the upstream saw %d requests, want 1", n)
			}
		})
	}
}

// TestViewRefusesAndDrops: the view closes a connection whose request has
// both Content-Length and Transfer-Encoding, drops an h2c upgrade and a
// client's own X-Real-IP, refuses a key header given twice, and never
// forwards CONNECT or the HTTP/2 preface.
func TestViewRefusesAndDrops(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			rules := defaultRules + "  - name: per-user\n    key: [header:X-User-ID]\n    on_missing_key: skip\n    limit: {algorithm: fixed_window, rate: 100, period: 1h}\n"
			addr := startVia(t, tr, up.URL, rules)

			// Content-Length beside Transfer-Encoding: answered, and the
			// connection closed (RFC 9112, 6.1).
			o := converse(t, addr, []step{{write: "POST /te HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", read: []string{"POST"}}}, true)
			if o.Conn != "closed" {
				t.Errorf("Content-Length and Transfer-Encoding: the connection stayed %s", o.Conn)
			}
			up.take()

			// Upgrade: h2c is dropped: the upstream gets a plain request.
			resp, _ := rawExchange(t, addr, "GET /up HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
			if resp.StatusCode != 200 {
				t.Errorf("h2c upgrade: %s, want 200 without the upgrade", resp.Status)
			}
			for _, r := range up.take() {
				if r.Header.Get("Upgrade") != "" || r.Header.Get("Http2-Settings") != "" {
					t.Errorf("h2c upgrade reached the upstream: %v", r.Header)
				}
			}

			// X-Real-IP from a client that is not a trusted proxy.
			rawExchange(t, addr, "GET /ip HTTP/1.1\r\nHost: gw.test\r\nX-Real-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\n\r\n")
			for _, r := range up.take() {
				if r.Header.Get("X-Real-Ip") != "" || r.Header.Get("True-Client-Ip") != "" {
					t.Errorf("a client's own X-Real-IP reached the upstream: %v", r.Header)
				}
			}

			// A key header twice: which would the upstream believe? 400.
			resp, _ = rawExchange(t, addr, "GET /k HTTP/1.1\r\nHost: gw.test\r\nX-User-ID: victim\r\nX-User-ID: me\r\n\r\n")
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("a key header twice: %s, want 400", resp.Status)
			}

			// CONNECT and the HTTP/2 preface never reach the upstream.
			for _, req := range []string{"CONNECT gw.test:443 HTTP/1.1\r\nHost: gw.test:443\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"} {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				io.WriteString(nc, req)
				nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				if resp, err := http.ReadResponse(bufio.NewReader(nc), nil); err == nil && resp.StatusCode < 400 {
					t.Errorf("%.20q: %s", req, resp.Status)
				}
				nc.Close()
			}
			if got := up.take(); len(got) > 0 {
				t.Errorf("reached the upstream: %+v", got)
			}
		})
	}
	// From a trusted proxy, X-Real-IP is passed on.
	up := newRecUpstream(t, nil)
	for _, client := range []string{"fast", "standard"} {
		addr := startGateway(t, client, up.URL, defaultRules+"client_ip: {trusted_proxies: [127.0.0.1]}\n")
		rawExchange(t, addr, "GET /ip HTTP/1.1\r\nHost: gw.test\r\nX-Real-IP: 192.0.2.7\r\n\r\n")
		if got := up.take(); len(got) != 1 || got[0].Header.Get("X-Real-Ip") != "192.0.2.7" {
			t.Errorf("%s: X-Real-IP from a trusted proxy: %+v", client, got)
		}
	}
}

// FuzzRulesCountWhatUpstreamRoutes is the differential test of the request
// view: the fuzzer writes a request's method and target, four gateways
// (every client and upstream transport) whose limits are used up serve it,
// and a lenient upstream (routes) must never be reached at a limited
// resource. As HTTP/1.0, the fast path hands the request to net/http.
func FuzzRulesCountWhatUpstreamRoutes(f *testing.F) {
	for _, v := range pathForms {
		f.Add(v.method, v.target, false)
		f.Add(v.method, v.target, true)
	}
	up := newRoutingUpstream(f)
	var addrs []string
	for _, tr := range transports {
		addrs = append(addrs, overLimit(f, tr, up))
	}
	f.Fuzz(func(t *testing.T, method, target string, http10 bool) {
		if method == "" || target == "" || len(target) > 2000 {
			return
		}
		if !h1.IsToken(method) {
			return // not a request a client can send
		}
		for i := 0; i < len(target); i++ {
			if c := target[i]; c <= ' ' || c == 0x7f {
				return
			}
		}
		proto := "HTTP/1.1"
		if http10 {
			proto = "HTTP/1.0"
		}
		req := method + " " + target + " " + proto + "\r\nHost: gw.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
		for k, addr := range addrs {
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(nc, req)
			io.Copy(io.Discard, io.LimitReader(nc, 1<<20)) // the answer, whatever it is
			nc.Close()
			if hits := up.take(); len(hits) > 0 {
				t.Fatalf("%s: %q reached a limited resource uncounted: %q", transports[k], req, hits)
			}
		}
	})
}
