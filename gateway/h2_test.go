package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ratekeeper/ratekeeper/gateway/internal/fastpath"
	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
)

// The request view over HTTP/2. The path, method and Host forms of
// view_test.go are sent over h2c and over TLS, mixed with HTTP/1.1 from
// the same client. Then come HTTP/2's own ways of saying a request,
// written frame by frame, against an upstream that reads what it is sent
// as leniently as nginx. Then a fuzzer writes header blocks. In every one,
// no request may reach a limited resource more often than its limit
// allows, and the upstream must be sent only what the rules saw.

// h2Edges are the two ways to speak HTTP/2 to the gateway.
var h2Edges = []string{"h2c", "tls"}

// h2Gateway is a gateway that serves HTTP/2, and HTTP/1.1 beside it on the
// same listener.
type h2Gateway struct {
	addr  string
	roots *x509.CertPool // the CA of its certificate; nil for h2c
}

// startH2 starts a gateway on tr in front of upstream with rules, serving
// h2c by prior knowledge (edge "h2c") or TLS with ALPN (edge "tls").
func startH2(t testing.TB, tr via, edge, upstream, rules string) *h2Gateway {
	t.Helper()
	g := &h2Gateway{}
	extra := "h2c: true\n"
	if edge == "tls" {
		e := newEdge(t)
		extra, g.roots = e.tlsSection(), e.ca.Pool()
	}
	g.addr = startVia(t, tr, upstream, extra+rules)
	return g
}

// dial opens an HTTP/2 connection.
func (g *h2Gateway) dial(t testing.TB) *h2conn {
	t.Helper()
	if g.roots == nil {
		return dialH2C(t, g.addr)
	}
	return dialH2TLS(t, g.addr, g.roots)
}

// scheme is the :scheme of requests to g.
func (g *h2Gateway) scheme() string {
	if g.roots == nil {
		return "http"
	}
	return "https"
}

// exchange1 sends raw over HTTP/1.1 on a new connection and reads the
// answer.
func (g *h2Gateway) exchange1(t testing.TB, raw string) (*http.Response, string) {
	t.Helper()
	if g.roots == nil {
		return rawExchange(t, g.addr, raw)
	}
	nc, err := tls.Dial("tcp", g.addr, &tls.Config{RootCAs: g.roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return rawExchangeOn(t, nc, raw)
}

// h1Sender sends over HTTP/1.1 on g's listener.
func (g *h2Gateway) h1Sender() sendFunc { return exchangeSender(g.exchange1, "HTTP/1.1", "") }

// h2Sender sends over one HTTP/2 connection, dialled again when the
// gateway has closed it.
func (g *h2Gateway) h2Sender(t testing.TB) sendFunc {
	var c *h2conn
	return func(t testing.TB, method, target string) int {
		t.Helper()
		if c == nil || !c.usable() {
			c = g.dial(t)
		}
		fields := []string{":method", method, ":scheme", g.scheme(), ":authority", "gw.test", ":path", target}
		if strings.EqualFold(method, "POST") {
			fields = append(fields, "content-length", "0")
		}
		return c.get(fields...).status
	}
}

// Over HTTP/2 too, every form of a limited path and
// method (HEAD as GET, any letter case) counts against the limit it counts
// against over HTTP/1.1, over h2c and over TLS, on every transport; and
// one client's requests count together whichever protocol each took.
func TestH2RulesCountEveryFormOfAPath(t *testing.T) {
	noRecoveredPanics(t)
	for _, edge := range h2Edges {
		for _, tr := range transports {
			t.Run(edge+"/"+tr.String(), func(t *testing.T) {
				up := newRoutingUpstream(t)
				g := startH2(t, tr, edge, up.url, limitRules)
				h1s, h2s := g.h1Sender(), g.h2Sender(t)
				useUp(t, up, h2s, h1s) // POST over HTTP/2, GET over HTTP/1.1
				countsEveryForm(t, up, edge+" HTTP/2", h2s)
				countsEveryForm(t, up, edge+" HTTP/1.1", h1s)
			})
		}
	}
}

// Over HTTP/2 too, a rule on the Host counts :authority, a Host
// header without it, and every form of either, together with the same
// client's HTTP/1.1 requests.
func TestH2HostRulesCount(t *testing.T) {
	noRecoveredPanics(t)
	for _, edge := range h2Edges {
		for _, tr := range transports {
			t.Run(edge+"/"+tr.String(), func(t *testing.T) {
				var mu sync.Mutex
				served := 0 // requests for the tenant, as a virtual-hosting upstream reads them
				up := newRecUpstream(t, func(w http.ResponseWriter, r *http.Request) {
					if canonicalHostOf(r.Header.Get("X-Forwarded-Host")) == "api.example.com" {
						mu.Lock()
						served++
						mu.Unlock()
					}
					io.WriteString(w, "ok")
				})
				g := startH2(t, tr, edge, up.URL, hostRules)
				if resp, _ := g.exchange1(t, "GET /a HTTP/1.1\r\nHost: api.example.com\r\n\r\n"); resp.StatusCode != 200 {
					t.Fatalf("the first request, over HTTP/1.1: %s", resp.Status)
				}
				s := g.scheme()
				for _, f := range [][]string{
					{":method", "GET", ":scheme", s, ":authority", "api.example.com", ":path", "/a"},
					{":method", "GET", ":scheme", s, ":authority", "API.Example.com:8080", ":path", "/a"},
					{":method", "GET", ":scheme", s, ":authority", "api.example.com.", ":path", "/a"},
					{":method", "GET", ":scheme", s, ":path", "/a", "host", "api.example.com"},
					{":method", "GET", ":scheme", s, ":path", "/a", "host", "API.EXAMPLE.COM:443"},
					{":method", "GET", ":scheme", s, ":authority", "api.example.com", ":path", "/a", "host", "api.example.com"},
					{":method", "HEAD", ":scheme", s, ":authority", "api.example.com", ":path", "/a"},
					{":method", "GET", ":scheme", s, ":authority", "api.example.com", ":path", "http://elsewhere/a"},
					{":method", "GET", ":scheme", s, ":authority", "elsewhere", ":path", "/a", "host", "api.example.com"},
					{":method", "GET", ":scheme", s, ":path", "/a", "host", " api.example.com"},
					{":method", "GET", ":scheme", s, ":path", "/a", "host", "api.example.com", "host", "elsewhere"},
				} {
					c := g.dial(t)
					a := c.get(f...)
					if a.status == 200 || a.status >= 500 {
						t.Errorf("%q: %s, want 429 (or 400, or a reset stream)", f, a)
					}
				}
				// A POST with a body of unknown length, and one that
				// expects 100-continue.
				c := g.dial(t)
				id := c.open(false, ":method", "POST", ":scheme", s, ":authority", "api.example.com", ":path", "/a")
				c.write(c.fr.WriteData(id, true, []byte("body")))
				id2 := c.open(false, ":method", "POST", ":scheme", s, ":authority", "api.example.com", ":path", "/a", "expect", "100-continue", "content-length", "1")
				c.write(c.fr.WriteData(id2, true, []byte("x")))
				for id, a := range c.wait(id, id2) {
					if a.status != http.StatusTooManyRequests {
						t.Errorf("POST %d: %s, want 429", id, a)
					}
				}
				// An absolute :path names a host the gateway ignores, as
				// it sends the upstream only the path: :authority is the
				// host (RFC 9113, 8.3.1), and served below counts it.
				g.dial(t).get(":method", "GET", ":scheme", s, ":authority", "elsewhere", ":path", "http://api.example.com/a")
				if resp, _ := g.exchange1(t, "GET /a HTTP/1.1\r\nHost: api.example.com\r\n\r\n"); resp.StatusCode != 429 {
					t.Errorf("HTTP/1.1 after HTTP/2: %s, want 429", resp.Status)
				}
				mu.Lock()
				defer mu.Unlock()
				if served != 1 {
					t.Errorf("the upstream served api.example.com %d times under a limit of 1", served)
				}
			})
		}
	}
}

// canonicalHostOf is a host as a virtual-hosting upstream compares it.
func canonicalHostOf(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// wireReq is one request as wireUpstream received it.
type wireReq struct {
	line           string   // the request line as sent
	lines          []string // the header lines as sent
	method, target string   // read from the line leniently
	header         http.Header
	body           string
	trailer        http.Header
}

// wireUpstream is an upstream that reads a request line as leniently as
// nginx does (words split at any run of white space, so "GET  /a" is a
// GET of /a), the rest as net/http does (values trimmed), and records
// what it read beside what it was sent. It serves one request a
// connection.
type wireUpstream struct {
	url  string
	mu   sync.Mutex
	reqs []wireReq
}

func newWireUpstream(t testing.TB) *wireUpstream {
	u := &wireUpstream{}
	u.url = h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		words := strings.Fields(line)
		if len(words) < 2 {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		rec := wireReq{line: strings.TrimRight(line, "\r\n"), method: words[0], target: words[1]}
		var head strings.Builder
		head.WriteString("POST / HTTP/1.1\r\n") // the method and target are read above
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(l)
			if l == "\r\n" || l == "\n" {
				break
			}
			rec.lines = append(rec.lines, strings.TrimRight(l, "\r\n"))
		}
		req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader(head.String()), br)))
		if err != nil {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		body, err := io.ReadAll(req.Body)
		rec.header, rec.body, rec.trailer = req.Header, string(body), req.Trailer
		if err != nil {
			rec.body += " [body error]"
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, rec)
		u.mu.Unlock()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	return u
}

func (u *wireUpstream) take() []wireReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.reqs
	u.reqs = nil
	return r
}

// rawRules allow one request an hour to each of: GET /limited (HEAD
// too), /u as one X-User-ID, and the host api.example.com.
const rawRules = `rules:
  - name: limited
    match: {methods: [GET], path: /limited}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: per-user
    match: {path: /u}
    key: [header:X-User-ID]
    on_missing_key: skip
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: tenant
    match: {hosts: [api.example.com]}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`

// h2get is the header block of a GET of path from gw.test over h2c.
func h2get(path string, more ...string) []string {
	return append([]string{":method", "GET", ":scheme", "http", ":authority", "gw.test", ":path", path}, more...)
}

// userGet is the header block of a GET of /u as user.
func userGet(user string) []string { return h2get("/u", "x-user-id", user) }

// tenantGet is the header block of a GET from the tenant's host.
var tenantGet = []string{":method", "GET", ":scheme", "http", ":authority", "api.example.com", ":path", "/t"}

// h2case is a request written in frames, and the ordinary request it is
// a form of.
type h2case struct {
	name  string
	send  func(c *h2conn) *h2answer
	plain []string // the ordinary form; nil when none is limited
	// want: "counted" (served, and counted with plain), "refused" (400,
	// 405 or a reset stream, and not counted), or "" (either, the
	// upstream oracle decides).
	want  string
	check func(t *testing.T, got []wireReq) // more to hold the upstream's requests to
}

// req sends a header block alone.
func req(fields ...string) func(*h2conn) *h2answer {
	return func(c *h2conn) *h2answer { return c.get(fields...) }
}

// withBody sends a header block, body in DATA and then trailers, if
// any, in a second HEADERS frame.
func withBody(fields []string, body []byte, trailers ...string) func(*h2conn) *h2answer {
	return func(c *h2conn) *h2answer {
		id := c.open(false, fields...)
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 16384) // the default SETTINGS_MAX_FRAME_SIZE
			c.write(c.fr.WriteData(id, n == len(rest) && len(trailers) == 0, rest[:n]))
			rest = rest[n:]
		}
		if len(trailers) > 0 {
			c.write(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(trailers...), EndStream: true, EndHeaders: true}))
		}
		return c.wait(id)[id]
	}
}

// continued sends a header block split into a HEADERS frame and
// CONTINUATION frames, one for each of rest.
func continued(first []string, rest ...[]string) func(*h2conn) *h2answer {
	return func(c *h2conn) *h2answer {
		id := c.openFrame(first, true, len(rest) == 0)
		for i, f := range rest {
			c.write(c.fr.WriteContinuation(id, i == len(rest)-1, c.block(f...)))
		}
		return c.wait(id)[id]
	}
}

func (a *h2answer) refused() bool {
	return a.status == http.StatusBadRequest || a.status == http.StatusMethodNotAllowed || a.wasRst || a.lost
}

// h2ReserveCases are HTTP/2 requests whose reserve reserveRules read
// from the body: the fields after the head's, the body in DATA frames,
// trailers, the status and the remaining (1000 less the reserve) the
// gateway must answer with.
var h2ReserveCases = []struct {
	name     string
	fields   []string
	frames   []string
	trailers []string
	status   int
	remain   int
}{
	{name: "json, content-length", fields: []string{"content-type", "application/json", "content-length", "16"}, frames: []string{`{"max_tokens":7}`}, status: 200, remain: 993},
	{name: "json, no content-length", fields: []string{"content-type", "application/json"}, frames: []string{`{"max_tokens":7}`}, status: 200, remain: 993},
	{name: "json, split mid-number", fields: []string{"content-type", "application/json; charset=utf-8"}, frames: []string{`{"max_to`, `kens":`, `7`, `}`}, status: 200, remain: 993},
	{name: "no content-type", frames: []string{`{"max_tokens":7}`}, status: 200, remain: 993},
	{name: "text/plain", fields: []string{"content-type", "text/plain"}, frames: []string{`{"max_tokens":7}`}, status: 200, remain: 993},
	{name: "100 KiB in frames", fields: []string{"content-type", "application/json"}, frames: splitEvery(string(chatBody("7", 100<<10)), 16384), status: 200, remain: 993},
	{name: "trailers", fields: []string{"content-type", "application/json", "trailer", "x-t"}, frames: []string{`{"max_tokens":7}`}, trailers: []string{"x-t", "1"}, status: 200, remain: 993},
	{name: "empty", fields: []string{"content-type", "application/json"}, status: 200, remain: 500},
	{name: "not json", fields: []string{"content-type", "application/json"}, frames: []string{`max_tokens=7`}, status: 200, remain: 500},
	{name: "grpc label", fields: []string{"content-type", "application/grpc"}, frames: []string{`{"max_tokens":7}`}, status: 200, remain: 500},
	{name: "content-length over the DATA", fields: []string{"content-type", "application/json", "content-length", "32"}, frames: []string{`{"max_tokens":7}`}, status: 400},
	{name: "content-length under the DATA", fields: []string{"content-type", "application/json", "content-length", "8"}, frames: []string{`{"max_tokens":7}`}},
}

// splitEvery cuts s into pieces of n bytes.
func splitEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out, s = append(out, s[:n]), s[n:]
	}
	return append(out, s)
}

// TestH2ReserveFromBody: each of h2ReserveCases over h2c and TLS, on every
// transport, then a request of its own on the same connection: each is
// decided on its own body, and the upstream reads every body whole.
func TestH2ReserveFromBody(t *testing.T) {
	for _, edge := range h2Edges {
		for _, tr := range transports {
			t.Run(edge+"/"+tr.String(), func(t *testing.T) {
				up := newRecUpstream(t, usageReply)
				g := startH2(t, tr, edge, up.URL, reserveRules)
				c := g.dial(t)
				for i, rc := range h2ReserveCases {
					c = h2ReserveExchange(t, g, c, up, fmt.Sprintf("/r2/%d", i), rc.name, rc.fields, rc.frames, rc.trailers, rc.status, rc.remain)
				}
			})
		}
	}
}

// h2ReserveExchange sends one request of h2ReserveCases on c, then
// another with max_tokens 3, and holds both answers and the upstream's
// reads. A status of 0 lets the answer be any, and the connection end
// (DATA past the content-length is a protocol error): then the request
// and the next go on new connections, and it returns the last.
func h2ReserveExchange(t *testing.T, g *h2Gateway, c *h2conn, up *recUpstream, path, name string, fields, frames, trailers []string, status, remain int) *h2conn {
	t.Helper()
	head := func(p string) []string {
		return []string{":method", "POST", ":scheme", g.scheme(), ":authority", "gw.test", ":path", p, "authorization", p}
	}
	if status == 0 {
		c = g.dial(t)
	}
	id := c.open(len(frames) == 0 && len(trailers) == 0, append(head(path), fields...)...)
	for i, f := range frames {
		c.write(c.fr.WriteData(id, i == len(frames)-1 && len(trailers) == 0, []byte(f)))
	}
	if len(trailers) > 0 {
		c.write(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(trailers...), EndStream: true, EndHeaders: true}))
	}
	a := c.wait(id)[id]
	if status == 0 {
		c = g.dial(t)
	} else if !c.usable() {
		t.Fatalf("%s: the connection closed (%s)", name, a)
	}
	next := withBody(append(head(path+"/next"), "content-length", "16"), []byte(`{"max_tokens":3}`))(c)
	got := map[string]string{}
	for _, r := range up.take() {
		got[r.URI] = r.Body
	}
	body := strings.Join(frames, "")
	switch {
	case status == 0:
	case a.status != status:
		t.Errorf("%s: %s, want %d", name, a, status)
	case status != 200:
		if _, ok := got[path]; ok {
			t.Errorf("%s: answered %d, yet the upstream got it", name, status)
		}
	case a.header.Get("x-ratelimit-remaining") != strconv.Itoa(remain):
		t.Errorf("%s: remaining %q, want %d", name, a.header.Get("x-ratelimit-remaining"), remain)
	case got[path] != body:
		t.Errorf("%s: the upstream read %d bytes, want the %d sent", name, len(got[path]), len(body))
	}
	if next.status != 200 || next.header.Get("x-ratelimit-remaining") != "997" || got[path+"/next"] != `{"max_tokens":3}` {
		t.Errorf("%s: the next request: %s, remaining %q, the upstream read %q", name, next, next.header.Get("x-ratelimit-remaining"), got[path+"/next"])
	}
	return c
}

// h2Cases are HTTP/2's ways of saying a request that HTTP/1.1 has no
// words for, or says otherwise.
var h2Cases = []h2case{
	{name: "plain", send: req(h2get("/limited")...), plain: h2get("/limited"), want: "counted"},

	// :authority and Host.
	{name: ":authority and another Host", send: req(h2get("/limited", "host", "evil.test")...), plain: h2get("/limited"), want: "refused"},
	{name: ":authority and the same Host", send: req(append(tenantGet, "host", "API.example.com")...), plain: tenantGet, want: "counted"},
	{name: "Host alone", send: req(":method", "GET", ":scheme", "http", ":path", "/t", "host", "api.example.com"), plain: tenantGet, want: "counted"},
	{name: "Host alone, twice", send: req(":method", "GET", ":scheme", "http", ":path", "/t", "host", "api.example.com", "host", "evil.test"), plain: tenantGet, want: "refused"},
	{name: "Host alone, spaced", send: req(":method", "GET", ":scheme", "http", ":path", "/t", "host", "api.example.com "), plain: tenantGet},
	{name: ":authority with a port and capitals", send: req(":method", "GET", ":scheme", "http", ":authority", "API.Example.COM.:8443", ":path", "/t"), plain: tenantGet, want: "counted"},
	{name: ":authority with userinfo", send: req(":method", "GET", ":scheme", "http", ":authority", "x@api.example.com", ":path", "/t"), plain: tenantGet, want: "refused"},

	// :path forms.
	{name: "//limited", send: req(h2get("//limited")...), plain: h2get("/limited"), want: "counted"},
	{name: "/x/../limited", send: req(h2get("/x/../limited")...), plain: h2get("/limited"), want: "counted"},
	{name: "/%6cimited", send: req(h2get("/%6cimited")...), plain: h2get("/limited"), want: "counted"},
	{name: "/LIMITED/", send: req(h2get("/LIMITED/")...), plain: h2get("/limited"), want: "counted"},
	{name: "/limited;x=1", send: req(h2get("/limited;x=1")...), plain: h2get("/limited"), want: "counted"},
	{name: "/limited?q", send: req(h2get("/limited?q=1")...), plain: h2get("/limited"), want: "counted"},
	{name: "/limited#frag", send: req(h2get("/limited#frag")...), plain: h2get("/limited"), check: func(t *testing.T, got []wireReq) {
		for _, r := range got {
			if strings.Contains(r.target, "#") {
				t.Errorf("the upstream was sent a fragment: %q", r.line)
			}
		}
	}},
	{name: "/x#/../limited", send: req(h2get("/x#/../limited")...), plain: h2get("/limited")},
	{name: "absolute :path", send: req(h2get("http://evil.test/limited")...), plain: h2get("/limited"), want: "counted", check: func(t *testing.T, got []wireReq) {
		for _, r := range got {
			if strings.Contains(r.line+strings.Join(r.lines, "\n"), "evil") {
				t.Errorf("the upstream was sent the absolute :path's host: %q %q", r.line, r.lines)
			}
		}
	}},
	{name: "*", send: req(h2get("*")...), plain: h2get("/limited"), want: "refused"},
	{name: "empty :path", send: req(h2get("")...), plain: h2get("/limited"), want: "refused"},
	{name: "no leading slash", send: req(h2get("limited")...), plain: h2get("/limited"), want: "refused"},
	{name: "a space in the query", send: req(h2get("/public?x /limited")...), plain: h2get("/limited"), want: "refused"},
	{name: "a space in the path", send: req(h2get("/limited /x")...), plain: h2get("/limited")},

	// :method.
	{name: "get", send: req(":method", "get", ":scheme", "http", ":authority", "gw.test", ":path", "/limited"), plain: h2get("/limited"), want: "counted"},
	{name: "HEAD", send: req(":method", "HEAD", ":scheme", "http", ":authority", "gw.test", ":path", "/limited"), plain: h2get("/limited"), want: "counted"},
	{name: "hEaD", send: req(":method", "hEaD", ":scheme", "http", ":authority", "gw.test", ":path", "/limited"), plain: h2get("/limited"), want: "counted"},
	{name: "a method and a space", send: req(":method", "GET ", ":scheme", "http", ":authority", "gw.test", ":path", "/limited"), plain: h2get("/limited"), want: "refused"},
	{name: "a method and a tab", send: req(":method", "GET\t", ":scheme", "http", ":authority", "gw.test", ":path", "/limited"), plain: h2get("/limited"), want: "refused"},
	{name: "a request line in :method", send: req(":method", "GET /limited HTTP/1.1", ":scheme", "http", ":authority", "gw.test", ":path", "/public"), plain: h2get("/limited"), want: "refused"},
	{name: "CONNECT", send: req(":method", "CONNECT", ":authority", "gw.test:443"), plain: h2get("/limited"), want: "refused"},
	{name: "extended CONNECT", send: req(":method", "CONNECT", ":protocol", "websocket", ":scheme", "http", ":authority", "gw.test", ":path", "/limited"), plain: h2get("/limited"), want: "refused"},

	// Header names and order.
	{name: "an upper-case name", send: req(h2get("/u", "X-User-ID", "alice")...), plain: userGet("alice"), want: "refused"},
	{name: "a pseudo-header after a regular one", send: req(":method", "GET", ":scheme", "http", "x-a", "1", ":authority", "gw.test", ":path", "/limited"), plain: h2get("/limited"), want: "refused"},
	{name: "two :path", send: req(":method", "GET", ":scheme", "http", ":authority", "gw.test", ":path", "/public", ":path", "/limited"), plain: h2get("/limited"), want: "refused"},
	{name: "two :method", send: req(":method", "POST", ":method", "GET", ":scheme", "http", ":authority", "gw.test", ":path", "/limited"), plain: h2get("/limited"), want: "refused"},
	{name: "two :authority", send: req(":method", "GET", ":scheme", "http", ":authority", "gw.test", ":authority", "api.example.com", ":path", "/t"), plain: tenantGet, want: "refused"},
	{name: "Connection", send: req(h2get("/limited", "connection", "close")...), plain: h2get("/limited"), want: "refused"},
	{name: "Transfer-Encoding", send: req(h2get("/limited", "transfer-encoding", "chunked")...), plain: h2get("/limited"), want: "refused"},
	{name: "Upgrade", send: req(h2get("/limited", "upgrade", "h2c")...), plain: h2get("/limited"), want: "refused"},
	{name: "Keep-Alive", send: req(h2get("/limited", "keep-alive", "timeout=5")...), plain: h2get("/limited"), want: "refused"},
	{name: "Proxy-Connection", send: req(h2get("/limited", "proxy-connection", "keep-alive")...), plain: h2get("/limited"), want: "refused"},
	{name: "TE gzip", send: req(h2get("/limited", "te", "gzip")...), plain: h2get("/limited"), want: "refused"},
	{name: "TE trailers", send: req(h2get("/limited", "te", "trailers")...), plain: h2get("/limited"), want: "counted"},

	// Headers the rules read.
	{name: "the key header twice", send: req(h2get("/u", "x-user-id", "alice", "x-user-id", "bob")...), plain: userGet("alice"), want: "refused"},
	{name: "the key header with an underscore", send: req(h2get("/u", "x_user_id", "alice")...), plain: userGet("alice")},
	{name: "the key header, a space after", send: req(userGet("alice ")...), plain: userGet("alice"), want: "refused"},
	{name: "the key header, a tab before", send: req(userGet("\talice")...), plain: userGet("alice"), want: "refused"},
	{name: "the key header in a CONTINUATION", send: continued(h2get("/u"), []string{"x-user-id", "alice"}), plain: userGet("alice"), want: "counted"},
	{name: "the key header across CONTINUATIONs", send: continued([]string{":method", "GET"}, []string{":scheme", "http", ":authority", "gw.test"}, []string{":path", "/u", "x-user-id", "alice"}), plain: userGet("alice"), want: "counted"},
	{name: "cookie in two fields", send: req(h2get("/u", "x-user-id", "alice", "cookie", "a=1", "cookie", "b=2")...), plain: userGet("alice"), want: "counted", check: func(t *testing.T, got []wireReq) {
		if len(got) > 0 && strings.Join(got[0].header["Cookie"], "|") != "a=1; b=2" {
			t.Errorf("the upstream was sent Cookie %q, want one a=1; b=2", got[0].header["Cookie"])
		}
	}},

	// Bodies and trailers.
	{name: "content-length under the DATA", send: withBody(append(userGet("alice"), "content-length", "5"), []byte("0123456789")), plain: userGet("alice")},
	{name: "content-length over the DATA", send: withBody(append(userGet("alice"), "content-length", "10"), []byte("01234")), plain: userGet("alice")},
	{name: "trailers that name the key header", send: withBody(append(userGet("alice"), "trailer", "x-user-id"), []byte("body"), "x-user-id", "bob"), plain: userGet("alice"), want: "counted", check: keyOnlyInHead},
	{name: "trailers that name the key header, long body", send: withBody(append(userGet("alice"), "trailer", "x-user-id"), make([]byte, 100<<10), "x-user-id", "bob"), plain: userGet("alice"), want: "counted", check: keyOnlyInHead},
	{name: "the key header in trailers alone", send: withBody(h2get("/u", "trailer", "x-user-id"), make([]byte, 100<<10), "x-user-id", "alice"), plain: userGet("alice"), check: keyOnlyInHead},
	{name: "undeclared trailers", send: withBody(h2get("/u"), []byte("body"), "x-user-id", "alice"), plain: userGet("alice"), check: keyOnlyInHead},
}

// keyOnlyInHead holds the upstream to the key the rules read: alice in
// the head, if any key, and none in trailers.
func keyOnlyInHead(t *testing.T, got []wireReq) {
	for _, r := range got {
		if v := r.header.Get("X-User-Id"); v != "" && v != "alice" {
			t.Errorf("the upstream was sent X-User-Id %q, the rules read alice", v)
		}
		if v := r.trailer.Get("X-User-Id"); v != "" {
			t.Errorf("the upstream was sent X-User-Id %q in trailers", v)
		}
	}
}

// HTTP/2's own ways of saying a request, each written frame by frame
// on an h2c connection to a new gateway: the form, then its ordinary
// request, then the form again. Each form is refused or counted with its
// ordinary request, and the upstream is sent only what the rules saw.
func TestH2Frames(t *testing.T) {
	noRecoveredPanics(t)
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			for _, tc := range h2Cases {
				up := newWireUpstream(t)
				addr := startVia(t, tr, up.url, "h2c: true\n"+rawRules)
				a := tc.send(dialH2C(t, addr))
				t.Logf("%s: %s", tc.name, a)
				switch {
				case tc.want == "counted" && a.status != 200:
					t.Errorf("%s: %s, want 200", tc.name, a)
				case tc.want == "refused" && !a.refused():
					t.Errorf("%s: %s, want 400, 405 or a reset stream", tc.name, a)
				}
				if tc.plain != nil {
					p := dialH2C(t, addr).get(tc.plain...)
					switch {
					case a.status == 200 && tc.want == "counted" && p.status != http.StatusTooManyRequests:
						t.Errorf("%s was not counted with its ordinary form: that one got %s after it, want 429", tc.name, p)
					case tc.want == "refused" && p.status != 200:
						t.Errorf("%s was refused but counted: its ordinary form got %s after it, want 200", tc.name, p)
					}
					if again := tc.send(dialH2C(t, addr)); tc.want == "counted" && again.status != http.StatusTooManyRequests {
						t.Errorf("%s, again: %s, want 429", tc.name, again)
					}
				}
				got := up.take()
				var tl tally
				for _, r := range got {
					tl.add(t, tc.name, r)
				}
				if tl.over(1) {
					t.Errorf("%s: under limits of 1, the upstream served %s", tc.name, &tl)
				}
				if tc.check != nil {
					tc.check(t, got)
				}
			}
		})
	}
}

// ratedRules allow n requests an hour to GET /limited (HEAD too).
func ratedRules(n int) string {
	return "rules:\n  - name: limited\n    match: {methods: [GET], path: /limited}\n    limit: {algorithm: fixed_window, rate: " + strconv.Itoa(n) + ", period: 1h}\n"
}

// Many streams at once on one connection, in several forms of the limited
// request, are admitted exactly up to the limit, under concurrency.
func TestH2ManyStreamsExactLimit(t *testing.T) {
	const limit, streams = 10, 100
	noRecoveredPanics(t)
	forms := [][]string{
		h2get("/limited"), h2get("//limited"), h2get("/x/../limited"),
		{":method", "HEAD", ":scheme", "http", ":authority", "gw.test", ":path", "/limited"},
		{":method", "get", ":scheme", "http", ":authority", "gw.test", ":path", "/LIMITED/"},
	}
	for _, client := range []string{"fast", "standard"} {
		t.Run(client, func(t *testing.T) {
			up := newWireUpstream(t)
			addr := startGateway(t, client, up.url, "h2c: true\n"+ratedRules(limit))
			c := dialH2C(t, addr)
			var ids []uint32
			for i := range streams {
				ids = append(ids, c.open(true, forms[i%len(forms)]...))
			}
			codes := map[string]int{}
			for _, a := range c.wait(ids...) {
				codes[a.String()]++
			}
			if codes["200"] != limit || codes["429"] != streams-limit {
				t.Errorf("%d streams at once under a limit of %d: %v, want %d 200 and %d 429", streams, limit, codes, limit, streams-limit)
			}
			var tl tally
			for _, r := range up.take() {
				tl.add(t, "many streams", r)
			}
			if tl.limited != limit {
				t.Errorf("the upstream served GET /limited %d times, want %d", tl.limited, limit)
			}
		})
	}
}

// Rapid reset (CVE-2023-44487): streams reset right after their HEADERS
// may be counted, since the gateway decides before it reads the reset, but
// none reaches the upstream past the limit, and the gateway stays up and
// answers others at once, on the same connection and on new ones, without
// keeping a goroutine for each.
func TestH2RapidReset(t *testing.T) {
	noRecoveredPanics(t)
	const limit, streams = 5, 1000
	for _, client := range []string{"fast", "standard"} {
		t.Run(client, func(t *testing.T) {
			up := newWireUpstream(t)
			addr := startGateway(t, client, up.url, "h2c: true\n"+ratedRules(limit))
			before := runtime.NumGoroutine()
			c := dialH2C(t, addr)
			start := time.Now()
			for range streams {
				id := c.open(true, h2get("/limited")...)
				c.write(c.fr.WriteRSTStream(id, http2.ErrCodeCancel))
			}
			if c.usable() {
				if a := c.get(h2get("/public")...); a.status != 200 {
					t.Errorf("a request after %d reset streams on their connection: %s", streams, a)
				}
			}
			if a := dialH2C(t, addr).get(h2get("/public")...); a.status != 200 {
				t.Errorf("a request on a new connection after %d reset streams: %s", streams, a)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%d reset streams and two requests took %v", streams, d)
			}
			// What the resets left of the limit.
			admitted := 0
			for ; admitted <= limit; admitted++ {
				if a := dialH2C(t, addr).get(h2get("/limited")...); a.status != 200 {
					break
				}
			}
			var tl tally
			for _, r := range up.take() {
				tl.add(t, "rapid reset", r)
			}
			if tl.limited > limit {
				t.Errorf("the upstream served GET /limited %d times under a limit of %d", tl.limited, limit)
			}
			t.Logf("%d streams reset at once: %d counted, %d of them served; %d of the limit left", streams, limit-admitted, tl.limited-admitted, admitted)
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before+20 {
				if time.Now().After(deadline) {
					t.Fatalf("goroutines: %d before the resets, %d 5s after", before, runtime.NumGoroutine())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// fuzzLimit is the limit FuzzH2SameLimit's gateways keep.
const fuzzLimit = 3

// FuzzH2SameLimit writes a header block, split and followed as flags say,
// on an h2c connection to gateways on every transport whose limits are
// fuzzLimit an hour (GET /limited, /u by X-User-ID, api.example.com):
// however a request is said, the upstream, which reads request lines as
// leniently as nginx, never serves a limited resource more than
// fuzzLimit times, is sent only what the rules saw, and the gateway never
// panics (on the fast path, hook panics; net/http's recovered panics are
// read from its log).
//
// The block is one field a line, "name: value" (the name ends at the
// first ": " after its first byte, so ":path: /x" is :path). flags: 1
// ends the stream with the HEADERS (else body follows in DATA), 2 sends
// the second half of the fields in a CONTINUATION, 4 resets the stream
// after its HEADERS, 8 sends the last field as a trailer, 16 sends the
// request twice on the connection.
func FuzzH2SameLimit(f *testing.F) {
	seed := func(flags uint8, body string, lines ...string) {
		f.Add(strings.Join(lines, "\n"), flags, []byte(body))
	}
	base := []string{":method: GET", ":scheme: http", ":authority: gw.test"}
	seed(1, "", append(base, ":path: /limited")...)
	seed(1|16, "", append(base, ":path: //x/../LIMITED/")...)
	seed(1, "", ":method: GET ", ":scheme: http", ":authority: gw.test", ":path: /limited")
	seed(1, "", ":method: hEaD", ":scheme: http", ":authority: gw.test", ":path: /%6cimited;x")
	seed(1, "", append(base, ":path: /public?x /limited")...)
	seed(1|2, "", append(base, ":path: /u", "x-user-id: alice")...)
	seed(1, "", append(base, ":path: /u", "x-user-id: alice\t")...)
	seed(0|8, "body", append(base, ":path: /u", "trailer: x-user-id", "x-user-id: alice")...)
	seed(1, "", ":method: GET", ":scheme: http", ":path: /t", "host: API.example.com")
	seed(1, "", append(base, ":path: /t", "host: api.example.com")...)
	seed(1|4, "", append(base, ":path: /limited")...)
	seed(0, "0123456789", append(base, ":path: /u", "x-user-id: alice", "content-length: 5")...)
	seed(1, "", ":method: CONNECT", ":authority: gw.test:443")
	seed(1, "", append(base, ":path: http://evil/limited", "x_user_id: alice")...)

	type target struct {
		addr, name string
		up         *wireUpstream
		tl         tally
		c          *h2conn // kept from one input to the next while it lasts
	}
	var targets []*target
	for _, tr := range transports {
		up := newWireUpstream(f)
		addr := startVia(f, tr, up.url, "h2c: true\n"+strings.ReplaceAll(rawRules, "rate: 1,", "rate: "+strconv.Itoa(fuzzLimit)+","))
		targets = append(targets, &target{addr: addr, up: up, name: tr.String()})
	}
	f.Cleanup(func() {
		for _, tg := range targets {
			if tg.c != nil {
				tg.c.nc.Close()
			}
		}
	})
	f.Fuzz(func(t *testing.T, block string, flags uint8, body []byte) {
		if len(block) > 8<<10 || len(body) > 64<<10 {
			return
		}
		var fields []string
		for line := range strings.SplitSeq(block, "\n") {
			name, value := line, ""
			if i := strings.Index(line[min(1, len(line)):], ": "); i >= 0 {
				name, value = line[:i+1], line[i+3:]
			}
			fields = append(fields, name, value)
		}
		var trailer []string
		if flags&8 != 0 && flags&1 == 0 && len(fields) > 2 {
			fields, trailer = fields[:len(fields)-2], fields[len(fields)-2:]
		}
		panics := len(recoveredPanics())
		for _, tg := range targets {
			if tg.c == nil || !tg.c.usable() {
				if tg.c != nil {
					tg.c.nc.Close()
				}
				nc, err := net.Dial("tcp", tg.addr)
				if err != nil {
					t.Fatal(err)
				}
				if tg.c, err = openH2(nc); err != nil {
					t.Fatal(err)
				}
			}
			c := tg.c
			c.t = t
			c.nc.SetDeadline(time.Now().Add(10 * time.Second))
			clear(c.answers) // a reset stream's answer may come on
			for range 1 + int(flags>>4&1) {
				if !c.usable() {
					break
				}
				half := len(fields) / 4 * 2
				if flags&2 == 0 {
					half = len(fields)
				}
				id := c.openFrame(fields[:half], flags&1 != 0, half == len(fields))
				if half < len(fields) {
					c.write(c.fr.WriteContinuation(id, true, c.block(fields[half:]...)))
				}
				if flags&4 != 0 {
					c.write(c.fr.WriteRSTStream(id, http2.ErrCodeCancel))
				}
				if flags&1 == 0 {
					c.write(c.fr.WriteData(id, len(trailer) == 0, body[:min(len(body), 16384)]))
					if len(trailer) > 0 {
						c.write(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(trailer...), EndStream: true, EndHeaders: true}))
					}
				}
				if flags&4 == 0 {
					c.wait(id)
				}
			}
			for _, r := range tg.up.take() {
				tg.tl.add(t, fmt.Sprintf("%s %q", tg.name, block), r)
			}
			if tg.tl.over(fuzzLimit) {
				t.Fatalf("%s: %q (flags %d): under limits of %d, the upstream served %s", tg.name, block, flags, fuzzLimit, &tg.tl)
			}
			if p := recoveredPanics(); len(p) > panics {
				t.Fatalf("%s: %q (flags %d): net/http recovered a panic: %s", tg.name, block, flags, p[panics])
			}
		}
	})
}

// tally counts the requests an upstream served to each limited resource
// of rawRules, as it reads them, and holds each request to what the rules
// saw.
type tally struct{ limited, alice, tenant int }

func (tl *tally) String() string {
	return fmt.Sprintf("GET /limited %d times, /u as alice %d, api.example.com %d", tl.limited, tl.alice, tl.tenant)
}

func (tl *tally) over(limit int) bool {
	return tl.limited > limit || tl.alice > limit || tl.tenant > limit
}

// add counts r, and fails t unless it was sent as the rules saw it: a
// request line of three words with a token for a method, the normalized
// path, one Host, no header name with an underscore.
func (tl *tally) add(t testing.TB, name string, r wireReq) {
	t.Helper()
	route := routes(r.method, r.target)
	_, path, _ := strings.Cut(route, " ")
	switch {
	case route == "GET /limited":
		tl.limited++
	case path == "/u" && (r.header.Get("X-User-Id") == "alice" || r.trailer.Get("X-User-Id") == "alice"):
		tl.alice++ // as an upstream that reads trailers as headers would, too
	}
	if canonicalHostOf(r.header.Get("X-Forwarded-Host")) == "api.example.com" {
		tl.tenant++
	}
	if strings.Count(r.line, " ") != 2 || !h1.IsToken(r.method) {
		t.Errorf("%s: the upstream was sent the request line %q", name, r.line)
	}
	sent, _, _ := strings.Cut(r.target, "?")
	if _, norm, err := fastpath.NormalizeTarget(sent, false); err != nil || norm != sent {
		t.Errorf("%s: the upstream was sent the path %q, which the rules read as %q (%v)", name, sent, norm, err)
	}
	hosts := 0
	for _, l := range r.lines {
		k, _, _ := strings.Cut(l, ":")
		if strings.EqualFold(k, "Host") {
			hosts++
		}
		if strings.Contains(k, "_") {
			t.Errorf("%s: the upstream was sent %q", name, l)
		}
	}
	if hosts != 1 {
		t.Errorf("%s: the upstream was sent %d Host lines: %q", name, hosts, r.lines)
	}
}

// recovered are the lines in which net/http said it recovered a panic in
// a test gateway's handlers ("http: panic serving", "http2: panic
// serving"): it serves on after one, so a test would not otherwise know.
var recovered struct {
	sync.Mutex
	lines []string
}

func recoveredPanics() []string {
	recovered.Lock()
	defer recovered.Unlock()
	return slices.Clip(recovered.lines)
}

// noRecoveredPanics fails t if net/http recovers a panic in a test
// gateway's handler while t runs.
func noRecoveredPanics(t testing.TB) {
	n := len(recoveredPanics())
	t.Cleanup(func() {
		if p := recoveredPanics(); len(p) > n {
			t.Errorf("net/http recovered %d panics in the gateway's handlers; the first: %s", len(p)-n, p[n])
		}
	})
}

// panicLog passes a gateway's logs on, and keeps net/http's lines about
// the panics it recovered in recovered.
type panicLog struct{ slog.Handler }

func (h panicLog) Enabled(context.Context, slog.Level) bool { return true }

func (h panicLog) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "panic serving") {
		recovered.Lock()
		recovered.lines = append(recovered.lines, r.Message)
		recovered.Unlock()
	}
	if h.Handler.Enabled(ctx, r.Level) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h panicLog) WithAttrs(as []slog.Attr) slog.Handler { return panicLog{h.Handler.WithAttrs(as)} }

func (h panicLog) WithGroup(name string) slog.Handler { return panicLog{h.Handler.WithGroup(name)} }

// h2conn is a raw HTTP/2 client connection for the adversarial tests: it
// writes whatever frames a test asks for, valid or not, and reads the
// gateway's answers stream by stream. It is used from one goroutine.
type h2conn struct {
	t    testing.TB
	nc   net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	next uint32 // the next stream id

	answers map[uint32]*h2answer
	goaway  bool  // the gateway sent GOAWAY: open no more streams
	dead    error // why the connection ended (EOF, a read error)
}

// h2answer is what the gateway answered on one stream.
type h2answer struct {
	status int // 0: no response head
	header http.Header
	body   bytes.Buffer
	done   bool          // the stream ended (END_STREAM or RST_STREAM)
	reset  http2.ErrCode // the code of the gateway's RST_STREAM, if any
	wasRst bool
	lost   bool // the connection ended before the stream did
}

func (a *h2answer) String() string {
	switch {
	case a.wasRst:
		return "RST_STREAM " + a.reset.String()
	case a.lost:
		return "connection closed"
	}
	return strconv.Itoa(a.status)
}

// dialH2C opens an HTTP/2 connection with prior knowledge to addr.
func dialH2C(t testing.TB, addr string) *h2conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return newH2Conn(t, nc)
}

// dialH2TLS opens an HTTP/2 connection over TLS (ALPN h2) to addr.
func dialH2TLS(t testing.TB, addr string, roots *x509.CertPool) *h2conn {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := nc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN agreed on %q, want h2", p)
	}
	return newH2Conn(t, nc)
}

func newH2Conn(t testing.TB, nc net.Conn) *h2conn {
	t.Helper()
	t.Cleanup(func() { nc.Close() })
	c, err := openH2(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.t = t
	return c
}

// openH2 begins HTTP/2 on nc: the client preface and SETTINGS. The caller
// sets c.t before it waits for answers, and closes nc.
func openH2(nc net.Conn) (*h2conn, error) {
	nc.SetDeadline(time.Now().Add(10 * time.Second)) // against a hang, not a wait
	c := &h2conn{nc: nc, next: 1, answers: map[uint32]*h2answer{}}
	c.fr = http2.NewFramer(nc, nc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.AllowIllegalWrites = true
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		return nil, err
	}
	return c, c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
}

// block encodes name, value pairs as an HPACK header block, as they are:
// pseudo-headers anywhere, upper case, duplicates.
func (c *h2conn) block(fields ...string) []byte {
	c.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(c.hbuf.Bytes())
}

// open writes a HEADERS frame carrying fields on a new stream, ending the
// stream when end, and returns the stream's id.
func (c *h2conn) open(end bool, fields ...string) uint32 {
	return c.openFrame(fields, end, true)
}

// openFrame writes a HEADERS frame on a new stream; without endHeaders,
// CONTINUATION frames must follow.
func (c *h2conn) openFrame(fields []string, endStream, endHeaders bool) uint32 {
	id := c.next
	c.next += 2
	c.answers[id] = &h2answer{}
	c.write(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(fields...), EndStream: endStream, EndHeaders: endHeaders}))
	return id
}

// usable reports whether new streams may be opened on c.
func (c *h2conn) usable() bool { return c.dead == nil && !c.goaway }

// write fails the test on a write error other than the gateway having
// closed the connection (which wait reports).
func (c *h2conn) write(err error) {
	if err != nil && c.dead == nil {
		c.dead = err
	}
}

// get sends a request without a body and waits for its answer.
func (c *h2conn) get(fields ...string) *h2answer {
	id := c.open(true, fields...)
	return c.wait(id)[id]
}

// wait reads frames until every stream in ids has ended or the connection
// has, and returns the answers.
func (c *h2conn) wait(ids ...uint32) map[uint32]*h2answer {
	c.t.Helper()
	pending := func() bool {
		for _, id := range ids {
			if !c.answers[id].done {
				return true
			}
		}
		return false
	}
	for pending() && c.dead == nil {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				var waiting []string
				for _, id := range ids {
					if a := c.answers[id]; !a.done {
						waiting = append(waiting, fmt.Sprintf("stream %d (so far %d %q)", id, a.status, a.body.String()))
					}
				}
				c.t.Fatalf("no answer in 10s on %s: %v", strings.Join(waiting, ", "), err)
			}
			c.dead = err
			break
		}
		c.handle(f)
	}
	out := map[uint32]*h2answer{}
	for _, id := range ids {
		a := c.answers[id]
		if !a.done {
			a.done, a.lost = true, true
		}
		out[id] = a
	}
	return out
}

func (c *h2conn) handle(f http2.Frame) {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			c.write(c.fr.WriteSettingsAck())
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			c.write(c.fr.WritePing(true, f.Data))
		}
	case *http2.GoAwayFrame:
		c.goaway = true
		// Streams above the last one the gateway processed never will
		// be; those below may still be answered.
		for id, a := range c.answers {
			if id > f.LastStreamID && !a.done {
				a.done, a.lost = true, true
			}
		}
	case *http2.RSTStreamFrame:
		if a := c.answers[f.StreamID]; a != nil {
			a.done, a.wasRst, a.reset = true, true, f.ErrCode
		}
	case *http2.MetaHeadersFrame:
		a := c.answers[f.StreamID]
		if a == nil {
			return
		}
		if a.status == 0 || a.status < 200 {
			a.header = http.Header{}
			for _, hf := range f.RegularFields() {
				a.header.Add(hf.Name, hf.Value)
			}
			a.status, _ = strconv.Atoi(f.PseudoValue("status"))
		}
		if f.StreamEnded() {
			a.done = true
		}
	case *http2.DataFrame:
		if a := c.answers[f.StreamID]; a != nil {
			a.body.Write(f.Data())
			if f.StreamEnded() {
				a.done = true
			}
		}
		if n := len(f.Data()); n > 0 {
			c.write(c.fr.WriteWindowUpdate(0, uint32(n)))
		}
	}
}

// With h2c: true a clear-text listener serves HTTP/2 with prior knowledge
// beside HTTP/1.1; without it, the preface is refused.
func TestH2C(t *testing.T) {
	up := newRecUpstream(t, echoProto)
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			g := runGateway(t, transport, up.URL, "h2c: true\n"+perMinute3)
			base := "http://" + g.Addr().String()
			resp, body := fetch(t, h2cClient(), base+"/limited")
			if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" || body != "HTTP/1.1 http /limited" {
				t.Fatalf("h2c: %d over %s, upstream saw %q", resp.StatusCode, resp.Proto, body)
			}
			resp, _ = fetch(t, http.DefaultClient, base+"/limited")
			if resp.StatusCode != 200 || resp.Proto != "HTTP/1.1" || resp.Header.Get("X-RateLimit-Remaining") != "1" {
				t.Fatalf("HTTP/1.1 beside h2c: %d over %s, remaining %q", resp.StatusCode, resp.Proto, resp.Header.Get("X-RateLimit-Remaining"))
			}
			// The Upgrade form is not served: the request is answered
			// over HTTP/1.1, and counted.
			resp, _ = rawExchange(t, g.Addr().String(), "GET /limited HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
			if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "0" {
				t.Errorf("Upgrade: h2c: %d, remaining %q", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
			}
			off := runGateway(t, transport, up.URL, perMinute3)
			if _, err := h2cClient().Get("http://" + off.Addr().String() + "/limited"); err == nil {
				t.Error("h2c was served without h2c: true")
			}
			resp, _ = rawExchange(t, off.Addr().String(), "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
			if resp.StatusCode != http.StatusHTTPVersionNotSupported {
				t.Errorf("the preface without h2c: %d", resp.StatusCode)
			}
		})
	}
}

// An HTTP/2 body that ends before its content-length is a 400, on a
// client that is still there to read it; it was taken for a client that
// left: an empty 200, and the whole connection closed.
func TestH2ShortBody(t *testing.T) {
	up := newRecUpstream(t, echoProto)
	g := runGateway(t, "standard", up.URL, "h2c: true\nrules: []\n")
	c := dialH2C(t, g.Addr().String())
	a := withBody(h2get("/x", "content-length", "10"), []byte("01234"))(c)
	if a.status != http.StatusBadRequest || !strings.Contains(a.body.String(), "Content-Length") {
		t.Errorf("status %d, body %q; want 400 naming the Content-Length", a.status, a.body.String())
	}
	if got := up.take(); len(got) != 0 {
		t.Errorf("the upstream was sent %d requests", len(got))
	}
	if a2 := c.get(h2get("/y")...); a2.status != 200 {
		t.Errorf("the next request on the connection: %d (lost %v)", a2.status, a2.lost)
	}
}

// An HTTP/2 client that stops reading a large answer (it sends no
// WINDOW_UPDATE) holds the upstream no longer than write_timeout: the
// stalled write resets its stream, and the next stream on the connection
// is served.
func TestH2SlowReaderFreesUpstream(t *testing.T) {
	chunk := strings.Repeat("z", 1<<20)
	for _, edge := range h2Edges {
		t.Run(edge, func(t *testing.T) {
			done := make(chan struct{}, 1)
			up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/big" {
					io.WriteString(w, "ok")
					return
				}
				defer func() { done <- struct{}{} }()
				w.Header().Set("Content-Length", strconv.Itoa(64*len(chunk)))
				for range 64 {
					if _, err := io.WriteString(w, chunk); err != nil {
						return
					}
				}
			}))
			g := startH2(t, transports[0], edge, up.URL, "rules: []\nclient: {write_timeout: 500ms}\n")
			c := g.dial(t)
			id := c.open(true, ":method", "GET", ":scheme", g.scheme(), ":authority", "gw.test", ":path", "/big") // and read nothing
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("an HTTP/2 client that reads nothing held the upstream request for 5s, write_timeout 500ms")
			}
			if a := c.wait(id)[id]; !a.wasRst {
				t.Errorf("the stalled stream ended with %v, not RST_STREAM", a)
			}
			if a := c.get(":method", "GET", ":scheme", g.scheme(), ":authority", "gw.test", ":path", "/next"); a.status != 200 {
				t.Errorf("the next stream on the connection: %v", a)
			}
		})
	}
}

// BenchmarkH2 is BenchmarkFastPath over HTTP/2, which net/http serves:
// over TLS (h2 by ALPN) and clear text (h2c), every client's streams on
// one connection. Its allocations count the client's and the upstream's
// too; bench/run-h2-profile.sh counts the gateway's alone.
func BenchmarkH2(b *testing.B) {
	e := newEdge(b)
	up := newRecUpstream(b, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	rule := "rules:\n  - name: per-ip\n    key: [ip]\n    limit: {algorithm: leaky_bucket, rate: 1000000, period: 1s, burst: 1000}\n"
	for _, edge := range h2Edges {
		b.Run(edge, func(b *testing.B) {
			extra, c, base := "h2c: true\n", h2cClient(), "http://127.0.0.1:"
			if edge == "tls" {
				extra, c, base = e.tlsSection(), e.client(true), "https://localhost:"
			}
			g := runGateway(b, "fast", up.URL, extra+rule)
			defer c.CloseIdleConnections()
			getParallelWith(b, c, base+portOf(g.Addr())+"/v1/items/7")
		})
	}
}
