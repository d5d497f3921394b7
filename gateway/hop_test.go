package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
)

// Hop-by-hop headers: the rules read a request as the upstream receives
// it, after every hop-by-hop removal. A header the client names in
// Connection is gone before any rule reads it.

// TestHopConnectionNamesKeyHeader: twenty fresh API keys, each named in
// Connection so that the upstream never sees it, are twenty anonymous
// requests, limited by IP after 3, on every transport.
func TestHopConnectionNamesKeyHeader(t *testing.T) {
	const rule = `rules:
  - name: per-key
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
`
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, rule)
			passed := 0
			for i := range 20 {
				resp, _ := rawExchange(t, addr, fmt.Sprintf("GET /k HTTP/1.1\r\nHost: gw.test\r\nX-API-Key: r%d\r\nConnection: X-API-Key\r\n\r\n", i))
				if resp.StatusCode == 200 {
					passed++
				}
			}
			if passed != 3 {
				t.Errorf("%d of 20 passed, want 3: the rule counted keys the upstream never saw", passed)
			}
			for _, r := range up.take() {
				if v := r.Header.Get("X-Api-Key"); v != "" {
					t.Errorf("the upstream got X-API-Key %q", v)
				}
			}
		})
	}
}

// TestHopConnectionNamesCostHeader: a batch size named in Connection is
// dropped before the upstream, which then works on its default batch (5):
// the rule charges that default, not the 1 the client wrote.
func TestHopConnectionNamesCostHeader(t *testing.T) {
	const rule = `rules:
  - name: batch
    key: [ip]
    cost: {header: X-Batch-Size, max: 5, default: 5}
    limit: {algorithm: fixed_window, rate: 10, period: 1h}
`
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, rule)
			passed := 0
			for range 10 {
				resp, _ := rawExchange(t, addr, "POST /b HTTP/1.1\r\nHost: gw.test\r\nX-Batch-Size: 1\r\nConnection: X-Batch-Size\r\nContent-Length: 0\r\n\r\n")
				if resp.StatusCode == 200 {
					passed++
				}
			}
			if passed != 2 {
				t.Errorf("%d batches passed, want 2 of the upstream's default size 5", passed)
			}
			for _, r := range up.take() {
				if v := r.Header.Get("X-Batch-Size"); v != "" {
					t.Errorf("the upstream got X-Batch-Size %q", v)
				}
			}
		})
	}
}

// TestHopProxyAuthorization: Proxy-Authorization is the gateway's, not
// the upstream's (ReverseProxy removes it; the fast path does not forward
// it), so a rule may not read it, and the upstream never gets it.
func TestHopProxyAuthorization(t *testing.T) {
	up := newRecUpstream(t, nil)
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte("upstream: "+up.URL+`
rules:
  - name: per-proxy-user
    key: [header:Proxy-Authorization]
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), path, Options{})
	if err == nil || !strings.Contains(err.Error(), "rules[0].key[0]: Proxy-Authorization is a hop-by-hop") {
		t.Fatalf("a rule keyed on Proxy-Authorization: %v", err)
	}
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			addr := startVia(t, tr, up.URL, "")
			if resp, _ := rawExchange(t, addr, "GET /k HTTP/1.1\r\nHost: gw.test\r\nProxy-Authorization: Basic cjE=\r\n\r\n"); resp.StatusCode != 200 {
				t.Fatalf("%d", resp.StatusCode)
			}
			for _, r := range up.take() {
				if v := r.Header.Get("Proxy-Authorization"); v != "" {
					t.Errorf("the upstream got Proxy-Authorization %q", v)
				}
			}
		})
	}
}

// The property: what each kind of rule reads of a request (a key header,
// match.headers, a cost header, a tier header) is what the upstream
// receives, whatever hop-by-hop headers the request carries, on every
// client transport; and the next request on the connection is read whole.

// hopRules read one header each, and show what they read in the rate
// limit headers: user's q is 50000 for alice, 100000 for another key, and
// it is absent without one; match is present with X-Match: yes; cost's r
// is 100 less the cost (each path is new); tier's q is 20 for pro, else
// 10.
const hopRules = `client_ip: {trusted_proxies: [127.0.0.1, "::1"]}
rules:
  - name: user
    key: [header:X-User]
    on_missing_key: skip
    limit: {algorithm: fixed_window, rate: 100000, period: 1h}
    overrides: {alice: {rate: 50000}}
  - name: match
    match: {headers: {X-Match: "yes"}}
    limit: {algorithm: fixed_window, rate: 100000, period: 1h}
  - name: cost
    key: [path]
    cost: {header: X-Cost, max: 9, default: 5}
    limit: {algorithm: fixed_window, rate: 100, period: 1h}
  - name: tier
    key: [path]
    limit: {algorithm: fixed_window, rate: 10, period: 1h}
    tiers: {header: X-Plan, limits: {pro: {rate: 20}}}
`

// hopBase are the headers each request carries, one for each of hopRules.
const hopBase = "X-User: alice\r\nX-Match: yes\r\nX-Cost: 3\r\nX-Plan: pro\r\n"

// hopView is what hopRules read of a request.
type hopView struct {
	User  string // "", "alice" or "other"
	Match bool
	Cost  int
	Pro   bool
}

// hopFull is hopView of a request with hopBase and nothing dropped.
var hopFull = hopView{User: "alice", Match: true, Cost: 3, Pro: true}

// rulesRead is the view the rate limit headers of an answer show.
func rulesRead(h http.Header) hopView {
	q, r := rateItems(h.Values("Ratelimit-Policy"), "q"), rateItems(h.Values("Ratelimit"), "r")
	v := hopView{Match: q["match"] != "", Pro: q["tier"] == "20"}
	switch q["user"] {
	case "50000":
		v.User = "alice"
	case "":
	default:
		v.User = "other"
	}
	if n, err := strconv.Atoi(r["cost"]); err == nil {
		v.Cost = 100 - n
	}
	return v
}

// rateItems maps each rule named in RateLimit or RateLimit-Policy fields
// to its parameter param.
func rateItems(fields []string, param string) map[string]string {
	m := map[string]string{}
	for item := range strings.SplitSeq(strings.Join(fields, ","), ",") {
		parts := strings.Split(strings.TrimSpace(item), ";")
		for _, p := range parts[1:] {
			if k, v, _ := strings.Cut(p, "="); k == param {
				m[strings.Trim(parts[0], `"`)] = v
			}
		}
	}
	return m
}

// upstreamRead is the view of hopRules of the headers the upstream got.
func upstreamRead(h http.Header) hopView {
	v := hopView{Match: h.Get("X-Match") == "yes", Cost: 5, Pro: strings.TrimSpace(h.Get("X-Plan")) == "pro"}
	switch u := h.Get("X-User"); u {
	case "alice":
		v.User = "alice"
	case "":
	default:
		v.User = "other"
	}
	if c := h.Get("X-Cost"); c != "" {
		v.Cost, _ = strconv.Atoi(strings.TrimSpace(c))
	}
	return v
}

// hopCheck holds the answer to the request for uri to the property: if
// it was served, the rules read what the upstream got; if refused, the
// upstream got nothing.
func hopCheck(t testing.TB, what string, status int, h http.Header, uri string, got map[string]http.Header) hopView {
	t.Helper()
	up, ok := got[uri]
	switch {
	case status != 200 && ok:
		t.Errorf("%s: answered %d, yet the upstream got it", what, status)
	case status != 200:
	case !ok:
		t.Errorf("%s: answered 200, yet the upstream never got it", what)
	default:
		if rv, uv := rulesRead(h), upstreamRead(up); rv != uv {
			t.Errorf("%s: the rules read %+v, the upstream got %+v (%v)", what, rv, uv, up)
		}
	}
	return rulesRead(h)
}

// byURI maps each request the upstream got to its headers.
func byURI(reqs []upReq) map[string]http.Header {
	m := map[string]http.Header{}
	for _, r := range reqs {
		m[r.URI] = r.Header
	}
	return m
}

// hop1Cases are HTTP/1.x requests with hop-by-hop headers: the request
// line's version, the header lines after hopBase, and a body.
var hop1Cases = []struct{ proto, extra, body string }{
	{"HTTP/1.1", "", ""},
	{"HTTP/1.1", "Connection: X-User\r\n", ""},
	{"HTTP/1.1", "Connection: x-user\r\n", ""},
	{"HTTP/1.1", "connection: X-USER\r\n", ""},
	{"HTTP/1.1", "Connection: X-Match\r\n", ""},
	{"HTTP/1.1", "Connection: X-Cost\r\n", ""},
	{"HTTP/1.1", "Connection: X-Plan\r\n", ""},
	{"HTTP/1.1", "Connection: X-User, X-Match, X-Cost, X-Plan\r\n", ""},
	{"HTTP/1.1", "Connection: keep-alive , X-Cost ,X-Plan\r\n", ""},
	{"HTTP/1.1", "Connection: ,,X-User,,\r\n", ""},
	{"HTTP/1.1", "Connection: X-User\t,\tX-Match\r\n", ""},
	{"HTTP/1.1", "Connection: keep-alive\r\nConnection: X-Cost\r\n", ""},
	{"HTTP/1.1", "Connection: X-Plan\r\nConnection: close\r\n", ""},
	{"HTTP/1.1", "Connection: close, X-User\r\n", ""},
	{"HTTP/1.1", "Connection: X-User-Extra, X-Use\r\n", ""},
	{"HTTP/1.1", "Connection: X-User;q=1, \"X-Match\"\r\n", ""},
	{"HTTP/1.1", "Connection: X-Cost\r\nX-Cost: 3\r\n", ""},
	{"HTTP/1.1", "Connection: Host, X-Match\r\n", ""},
	{"HTTP/1.1", "Connection: Upgrade, X-User\r\nUpgrade: websocket\r\n", ""},
	{"HTTP/1.1", "Connection: Upgrade, HTTP2-Settings, X-Match\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n", ""},
	{"HTTP/1.1", "Connection: TE, X-Cost\r\nTE: trailers\r\n", ""},
	{"HTTP/1.1", "TE: trailers\r\n", ""},
	{"HTTP/1.1", "TE: trailers, deflate;q=0.5\r\n", ""},
	{"HTTP/1.1", "Keep-Alive: timeout=5\r\nConnection: keep-alive, X-Plan\r\n", ""},
	{"HTTP/1.1", "Proxy-Authorization: Basic eA==\r\nProxy-Connection: X-User\r\n", ""},
	{"HTTP/1.1", "Proxy-Authenticate: Basic\r\n", ""},
	{"HTTP/1.1", "Trailer: X-Cost\r\n", ""},
	{"HTTP/1.1", "Connection: Content-Length, X-Cost\r\nContent-Length: 2\r\n", "ab"},
	{"HTTP/1.1", "Connection: Transfer-Encoding, X-User\r\nTransfer-Encoding: chunked\r\n", "2\r\nab\r\n0\r\n\r\n"},
	{"HTTP/1.1", "Connection: Trailer\r\nTrailer: X-User\r\nTransfer-Encoding: chunked\r\n", "2\r\nab\r\n0\r\nX-User: mallory\r\n\r\n"},
	{"HTTP/1.0", "", ""},
	{"HTTP/1.0", "Connection: X-User\r\n", ""},
	{"HTTP/1.0", "Connection: keep-alive, X-Plan\r\nKeep-Alive: timeout=5\r\n", ""},
	{"HTTP/1.0", "Connection: X-Cost\r\nConnection: Keep-Alive\r\n", ""},
}

// TestHopByHopViewHTTP1: each of hop1Cases over raw HTTP/1.x, then a
// plain request on the same connection, on every transport.
func TestHopByHopViewHTTP1(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, hopRules)
			for i, c := range hop1Cases {
				hop1Exchange(t, addr, up, fmt.Sprintf("/h/%d", i), c.proto, c.extra, c.body)
			}
		})
	}
}

// hop1Exchange sends one request with extra and body after hopBase, checks
// the property, then does the same for a plain request on the connection
// if it stayed open, whose view must be whole.
func hop1Exchange(t testing.TB, addr string, up *recUpstream, path, proto, extra, body string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second)) // against a hang, not a wait
	br := bufio.NewReader(nc)
	method := "GET"
	if body != "" {
		method = "POST"
	}
	what := fmt.Sprintf("%s %q", proto, extra)
	io.WriteString(nc, method+" "+path+" "+proto+"\r\nHost: gw.test\r\n"+hopBase+extra+"\r\n"+body)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.Close {
		hopCheck(t, what, resp.StatusCode, resp.Header, path, byURI(up.take()))
		return
	}
	io.WriteString(nc, "GET "+path+"/next HTTP/1.1\r\nHost: gw.test\r\n"+hopBase+"\r\n")
	next, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: the next request: %v", what, err)
	}
	io.Copy(io.Discard, next.Body)
	got := byURI(up.take())
	hopCheck(t, what, resp.StatusCode, resp.Header, path, got)
	if v := hopCheck(t, what+", the next request", next.StatusCode, next.Header, path+"/next", got); v != hopFull {
		t.Errorf("%s: the next request was read as %+v (%d), want %+v", what, v, next.StatusCode, hopFull)
	}
}

// hop2Cases are the fields after hopBase's of HTTP/2 requests: the
// connection-specific ones are refused (RFC 9113, 8.2.2), TE: trailers
// passes, and what HTTP/2 does carry the rules read as the upstream does.
var hop2Cases = [][]string{
	nil,
	{"te", "trailers"},
	{"te", "gzip"},
	{"te", "trailers, x-user"},
	{"connection", "x-user"},
	{"keep-alive", "timeout=5"},
	{"proxy-connection", "x-user"},
	{"upgrade", "websocket"},
	{"transfer-encoding", "chunked"},
	{"proxy-authorization", "Basic eA=="},
	{"proxy-authenticate", "Basic"},
	{"trailer", "x-cost"},
	{"http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA"},
}

// TestHopByHopViewHTTP2: each of hop2Cases over h2c and TLS, then a plain
// request on the same connection, on every transport.
func TestHopByHopViewHTTP2(t *testing.T) {
	base := []string{"x-user", "alice", "x-match", "yes", "x-cost", "3", "x-plan", "pro"}
	for _, edge := range h2Edges {
		for _, tr := range transports {
			t.Run(edge+"/"+tr.String(), func(t *testing.T) {
				up := newRecUpstream(t, nil)
				g := startH2(t, tr, edge, up.URL, hopRules)
				var c *h2conn
				for i, extra := range hop2Cases {
					if c == nil || !c.usable() {
						c = g.dial(t)
					}
					path := fmt.Sprintf("/h2/%d", i)
					fields := append([]string{":method", "GET", ":scheme", g.scheme(), ":authority", "gw.test", ":path", path}, base...)
					a := c.get(append(fields, extra...)...)
					if !c.usable() {
						c = g.dial(t)
					}
					fields[7] = path + "/next"
					next := c.get(fields...)
					got := byURI(up.take())
					what := fmt.Sprintf("%q", extra)
					hopCheck(t, what, a.status, a.header, path, got)
					if v := hopCheck(t, what+", the next request", next.status, next.header, path+"/next", got); v != hopFull {
						t.Errorf("%s: the next request was read as %+v (%s), want %+v", what, v, next, hopFull)
					}
				}
			})
		}
	}
}

// FuzzHopByHopView lets a fuzzer write the Connection header and the
// header lines after it, over HTTP/1.1 or 1.0, to a fast and a standard
// gateway: each request and the next on its connection must hold to the
// property of TestHopByHopViewHTTP1.
func FuzzHopByHopView(f *testing.F) {
	f.Add("X-User", "", false)
	f.Add("keep-alive , X-Cost", "Connection: X-Plan", false)
	f.Add("x-match", "TE: trailers", true)
	f.Add("Upgrade, X-User", "Upgrade: websocket", false)
	f.Add("Proxy-Authorization", "Proxy-Authorization: Basic eA==\nKeep-Alive: 5", false)
	type gw struct {
		addr string
		up   *recUpstream
	}
	var gws []gw
	for _, tr := range transports[:2] {
		up := newRecUpstream(f, nil)
		gws = append(gws, gw{startVia(f, tr, up.URL, hopRules), up})
	}
	n := 0
	f.Fuzz(func(t *testing.T, conn, extra string, http10 bool) {
		lines, ok := hopFuzzLines(conn, extra)
		if !ok {
			t.Skip()
		}
		proto := "HTTP/1.1"
		if http10 {
			proto = "HTTP/1.0"
		}
		for _, g := range gws {
			n++
			hop1Exchange(t, g.addr, g.up, fmt.Sprintf("/f/%d", n), proto, lines, "")
		}
	})
}

// hopFuzzLines are the header lines of a fuzzed request, or false for
// input that would frame a body (which the exchange does not send) or
// break the head.
func hopFuzzLines(conn, extra string) (string, bool) {
	if len(conn)+len(extra) > 512 || strings.ContainsAny(conn, "\r\n") || strings.Contains(extra, "\r") {
		return "", false
	}
	lines := "Connection: " + conn + "\r\n"
	for line := range strings.SplitSeq(extra, "\n") {
		if line == "" {
			continue
		}
		name, _, _ := strings.Cut(line, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-length", "transfer-encoding", "expect":
			return "", false
		}
		lines += line + "\r\n"
	}
	return lines, true
}

// FuzzDropHopByHopSameAsReverseProxy: the view's headers (dropHopByHop)
// are those httputil.ReverseProxy sends the upstream, and ReverseProxy
// sends the same of a request the view has seen as of the request itself.
// Each fuzzed line is a header "Name: value".
func FuzzDropHopByHopSameAsReverseProxy(f *testing.F) {
	for _, s := range []string{
		"Connection: X-User\nX-User: a",
		"Connection: keep-alive , x-user\nconnection: X-COST\nX-User: a\nX-Cost: 1\nKeep-Alive: 5",
		"Connection: Upgrade, X-User\nUpgrade: websocket\nX-User: a",
		"Connection: upgrade\nUpgrade: h2c\nUpgrade: websocket",
		"TE: trailers, deflate\nTrailer: X-User\nConnection: TE",
		"TE: trailerſ\nConnection: upgradE\nUpgrade: x",
		"Proxy-Authorization: a\nProxy-Authenticate: b\nProxy-Connection: X-User\nX-User: a",
		"Connection: ,\t,X-User\t\nX-User: a\nX-User: b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lines string) {
		h := http.Header{}
		for line := range strings.SplitSeq(lines, "\n") {
			name, value, ok := strings.Cut(line, ":")
			if !ok || !h1.IsToken(name) || strings.ContainsAny(value, "\r\x00") {
				continue
			}
			h.Add(name, strings.Trim(value, " \t"))
		}
		view := h.Clone()
		dropHopByHop(view)
		sent := proxied(t, h)
		if sent == nil {
			return // refused by ReverseProxy (an unprintable Upgrade)
		}
		forwarded := view.Clone()
		for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
			delete(forwarded, k) // the gateway's Rewrite writes them
		}
		if !reflect.DeepEqual(forwarded, sent) {
			t.Fatalf("%q: the view is %v, ReverseProxy sends %v", lines, view, sent)
		}
		if again := proxied(t, view); !reflect.DeepEqual(again, sent) {
			t.Fatalf("%q: after the view ReverseProxy sends %v, without it %v", lines, again, sent)
		}
	})
}

// proxied is what httputil.ReverseProxy sends upstream of a request with
// the header h, less the headers the gateway's Rewrite writes itself; nil
// when it sends nothing.
func proxied(t *testing.T, h http.Header) http.Header {
	t.Helper()
	var sent http.Header
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "upstream.test" },
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent = r.Header.Clone()
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		}),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header = h.Clone()
	rp.ServeHTTP(httptest.NewRecorder(), r)
	if sent != nil {
		if _, ok := h["User-Agent"]; !ok {
			delete(sent, "User-Agent") // ReverseProxy's empty one
		}
	}
	return sent
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
