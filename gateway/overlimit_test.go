package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
	"github.com/ratekeeper/ratekeeper/internal/tlstest"
)

// over_limit in the gateway: a rule that forwards names itself in the
// operator's header to the upstream, a rule that reroutes sends the
// request to its own upstream, and a client's own copy of such a header
// never reaches any upstream, on every transport.

const forwardRules = `rules:
  - name: monthly
    key: [ip]
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
    over_limit: {action: forward, header: X-Quota-Exceeded}
  - name: daily
    key: [ip]
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
    over_limit: {action: forward, header: X-Quota-Exceeded}
  - name: hard
    key: [ip]
    limit: {algorithm: fixed_window, rate: 5, period: 1h}
`

// TestOverLimitForwardHeader: the upstream gets the header exactly when
// the request is over a forwarding rule's limit, listing every rule
// exceeded in the file's order; the client's forged copies never reach
// it; the enforced rule still refuses. The fast path serves it all.
func TestOverLimitForwardHeader(t *testing.T) {
	want := []string{"", "", "monthly", "monthly, daily", "monthly, daily"}
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, forwardRules)
			for i := range 6 {
				resp, _ := rawExchange(t, addr, fmt.Sprintf("GET /f/%d HTTP/1.1\r\nHost: gw.test\r\nX-Quota-Exceeded: forged\r\nx-quota-exceeded: forged2\r\n\r\n", i))
				wantStatus := 200
				if i == 5 {
					wantStatus = 429
				}
				if resp.StatusCode != wantStatus {
					t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, wantStatus)
				}
				if i == 2 && resp.Header.Get("X-Ratelimit-Remaining") != "0" {
					t.Errorf("request 3: X-RateLimit-Remaining %q, want 0 (monthly is spent)", resp.Header.Get("X-Ratelimit-Remaining"))
				}
			}
			got := up.take()
			if len(got) != len(want) {
				t.Fatalf("the upstream got %d requests, want %d", len(got), len(want))
			}
			for i, r := range got {
				if vs := r.Header.Values("X-Quota-Exceeded"); strings.Join(vs, "|") != want[i] {
					t.Errorf("request %d (%s): X-Quota-Exceeded %q, want %q", i+1, r.URI, vs, want[i])
				}
			}
			if tr.client == "fast" {
				if n := handOffCount(addr); n != 0 {
					t.Errorf("%d hand-offs to net/http: the fast path serves forward", n)
				}
			}
		})
	}
}

// stripRules forward in a header no request reaches the limit of, and
// match only /limited: the header is stripped from every request.
const stripRules = `rules:
  - name: billed
    match: {path: /limited}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1000, period: 1h}
    over_limit: {action: forward, header: X-Quota-Exceeded}
  - name: spill
    match: {path: /never}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1000, period: 1h}
    over_limit: {action: reroute, upstream: "http://127.0.0.1:1", header: X-Rerouted}
`

// TestOverLimitClientCopiesStripped: a client that sends an over_limit
// header itself, in any case and any number of times, never has it reach
// the upstream, whatever the request matched, over HTTP/1.1 on every
// transport.
func TestOverLimitClientCopiesStripped(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, stripRules)
			for _, path := range []string{"/limited", "/other"} {
				for _, hdr := range []string{"X-Quota-Exceeded: billed\r\n", "x-rerouted: spill\r\nX-QUOTA-EXCEEDED: a\r\nX-Quota-Exceeded: b\r\n"} {
					resp, _ := rawExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: gw.test\r\n"+hdr+"\r\n")
					if resp.StatusCode != 200 {
						t.Fatalf("%s: %d", path, resp.StatusCode)
					}
				}
			}
			checkStripped(t, up, 4)
		})
	}
}

// checkStripped fails if the upstream did not get n requests, or got an
// over_limit header in one.
func checkStripped(t *testing.T, up *recUpstream, n int) {
	t.Helper()
	got := up.take()
	if len(got) != n {
		t.Fatalf("the upstream got %d requests, want %d", len(got), n)
	}
	for _, r := range got {
		for _, h := range []string{"X-Quota-Exceeded", "X-Rerouted"} {
			if vs := r.Header.Values(h); len(vs) > 0 {
				t.Errorf("%s: the upstream got the client's %s %q", r.URI, h, vs)
			}
		}
	}
}

// TestOverLimitClientCopiesStrippedHTTP2: the same over HTTP/2, h2c and
// TLS, on every transport.
func TestOverLimitClientCopiesStrippedHTTP2(t *testing.T) {
	for _, edge := range h2Edges {
		for _, tr := range transports {
			t.Run(edge+"/"+tr.String(), func(t *testing.T) {
				up := newRecUpstream(t, nil)
				g := startH2(t, tr, edge, up.URL, stripRules)
				c := g.dial(t)
				for _, path := range []string{"/limited", "/other"} {
					a := c.get(":method", "GET", ":scheme", g.scheme(), ":authority", "gw.test", ":path", path,
						"x-quota-exceeded", "billed", "x-rerouted", "spill", "x-quota-exceeded", "again")
					if a.status != 200 {
						t.Fatalf("%s: %d", path, a.status)
					}
				}
				checkStripped(t, up, 2)
			})
		}
	}
}

const rerouteRules = `rules:
  - name: cheap
    key: [ip]
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
    over_limit: {action: reroute, upstream: "%s", header: X-Rerouted}
  - name: hard
    key: [ip]
    limit: {algorithm: fixed_window, rate: 4, period: 1h}
`

// TestOverLimitReroute: within the limit requests reach the main
// upstream; over it they reach the rule's, with the header, and the main
// upstream never sees them; the enforced rule still refuses, on every
// transport (the fast path hands them to net/http).
func TestOverLimitReroute(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			main, cheap := newRecUpstream(t, nil), newRecUpstream(t, nil)
			addr := startVia(t, tr, main.URL, fmt.Sprintf(rerouteRules, cheap.URL))
			for i, want := range []int{200, 200, 200, 200, 429} {
				resp, _ := rawExchange(t, addr, fmt.Sprintf("GET /r/%d HTTP/1.1\r\nHost: gw.test\r\nX-Rerouted: forged\r\n\r\n", i))
				if resp.StatusCode != want {
					t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
				}
			}
			checkReached(t, "main", main.take(), []string{"/r/0", "/r/1"}, "")
			checkReached(t, "cheap", cheap.take(), []string{"/r/2", "/r/3"}, "cheap")
			if tr == transports[0] && handOffCount(addr) != 5 {
				t.Errorf("%d hand-offs, want 5: the fast path takes no request a rule may reroute", handOffCount(addr))
			}
		})
	}
}

// checkReached fails unless up got exactly the requests uris, each with
// X-Rerouted equal to header.
func checkReached(t *testing.T, name string, got []upReq, uris []string, header string) {
	t.Helper()
	var seen []string
	for _, r := range got {
		seen = append(seen, r.URI)
		if vs := r.Header.Values("X-Rerouted"); strings.Join(vs, "|") != header {
			t.Errorf("%s got %s with X-Rerouted %q, want %q", name, r.URI, vs, header)
		}
	}
	if !slices.Equal(seen, uris) {
		t.Errorf("%s upstream got %q, want %q", name, seen, uris)
	}
}

// TestOverLimitRerouteReload: a reload that changes the reroute's URL
// sends the next request over the limit to the new one.
func TestOverLimitRerouteReload(t *testing.T) {
	main, first, second := newRecUpstream(t, nil), newRecUpstream(t, nil), newRecUpstream(t, nil)
	g := runGateway(t, "fast", main.URL, fmt.Sprintf(rerouteRules, first.URL))
	addr := g.Addr().String()
	get := func(path string) {
		t.Helper()
		if resp, _ := rawExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: gw.test\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	for _, p := range []string{"/a", "/b", "/c"} {
		get(p)
	}
	b, err := os.ReadFile(g.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.path, []byte(strings.Replace(string(b), first.URL, second.URL, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	get("/d")
	checkReached(t, "main", main.take(), []string{"/a", "/b"}, "")
	checkReached(t, "first", first.take(), []string{"/c"}, "cheap")
	checkReached(t, "second", second.take(), []string{"/d"}, "cheap")
}

// TestOverLimitLoggedAndListed: a request past a forwarding limit is
// logged in access_log: refused, with the rule and its key, and its key
// is listed among the rule's limited clients in /v1/top; /v1/rules shows
// the rule's over_limit.
func TestOverLimitLoggedAndListed(t *testing.T) {
	up := newRecUpstream(t, nil)
	path := filepath.Join(t.TempDir(), "gw.yaml")
	yaml := "listen: 127.0.0.1:0\nwatch: -1s\naccess_log: refused\nupstream: " + up.URL + "\nrules:\n" +
		"  - name: billed\n    key: [ip]\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n    over_limit: {action: forward, header: X-Over}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf lockedBuffer
	g, err := New(context.Background(), path, Options{AccessLog: &buf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.proc.Close() })
	for i := range 3 {
		if code := clientGet(g, "192.0.2.7", "/x"); code != 200 {
			t.Fatalf("request %d: %d", i+1, code)
		}
	}
	lines := buf.lines(t)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want the 2 over the limit: %v", len(lines), lines)
	}
	for i, l := range lines {
		if toJSON(l["over_limit"]) != `["billed"]` || l["refused_by"] != "" || l["key"] != "192.0.2.7" {
			t.Errorf("line %d: %v", i, l)
		}
	}
	var top dashboard.TopAnswer
	adminJSON(t, g, "/v1/top?rule=billed", &top)
	if r := top.Rules[0]; r.Kind != "refused" || r.Total != 2 || len(r.Entries) != 1 || r.Entries[0].Key != "192.0.2.7" {
		t.Errorf("billed's limited clients: %+v", r)
	}
	var st dashboard.Status
	adminJSON(t, g, "/v1/status", &st)
	if r := st.Rules[0]; r.OverLimit != 2 || r.Allowed != 1 || r.Refused != 0 {
		t.Errorf("/v1/status: %+v, want 1 allowed and 2 over the limit", r)
	}
	var rules AdminRules
	adminJSON(t, g, "/v1/rules", &rules)
	if o := rules.Rules[0].OverLimit; o == nil || *o != (AdminOverLimit{Action: "forward", Header: "X-Over"}) {
		t.Errorf("/v1/rules over_limit: %+v", o)
	}
}

// TestOverLimitConcurrencySpillOver: a concurrency rule that reroutes
// sends what it cannot hold to the other backend while the main one holds
// its request, on every transport.
func TestOverLimitConcurrencySpillOver(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			reached, release := make(chan struct{}), make(chan struct{})
			main := newRecUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					close(reached)
					<-release
				}
				defaultReply(w, r)
			})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free) // before main closes, should the test stop early
			spill := newRecUpstream(t, nil)
			addr := startVia(t, tr, main.URL, "rules:\n  - name: primary\n    concurrency: {max: 1}\n    over_limit: {action: reroute, upstream: \""+spill.URL+"\", header: X-Rerouted}\n")
			held := make(chan int, 1)
			go func() {
				resp, err := http.Get("http://" + addr + "/hold")
				if err != nil {
					held <- 0
					return
				}
				resp.Body.Close()
				held <- resp.StatusCode
			}()
			<-reached
			resp, _ := rawExchange(t, addr, "GET /spill HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			free()
			if resp.StatusCode != 200 || <-held != 200 {
				t.Fatalf("spilled %d", resp.StatusCode)
			}
			checkReached(t, "main", main.take(), []string{"/hold"}, "")
			checkReached(t, "spill", spill.take(), []string{"/spill"}, "primary")
		})
	}
}

// TestOverLimitRerouteTLS: a reroute to an https:// upstream is verified
// with upstream_tls, which an http:// main upstream leaves to it; without
// an https:// upstream anywhere, upstream_tls is refused.
func TestOverLimitRerouteTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "reroute CA")
	ca.Write(t, dir, "upca")
	cheap := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "cheap") }))
	cheap.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "cheap.internal").TLS(t)}}
	cheap.StartTLS()
	t.Cleanup(cheap.Close)
	main := newRecUpstream(t, nil)
	rule := "rules:\n  - name: r\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n    over_limit: {action: reroute, upstream: \"%s\"}\n"
	path := filepath.Join(dir, "gw.yaml")
	yaml := "upstream: " + main.URL + "\nupstream_tls: {ca_file: upca.crt, server_name: cheap.internal}\n" + fmt.Sprintf(rule, cheap.URL)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.proc.Close() })
	for i, want := range []string{"hello GET /x", "cheap"} {
		w := httptest.NewRecorder()
		g.handler.ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
		if w.Code != 200 || w.Body.String() != want {
			t.Errorf("request %d: %d %q, want %q", i+1, w.Code, w.Body, want)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Replace(yaml, cheap.URL, main.URL, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err == nil || !strings.Contains(err.Error(), "upstream_tls: is set but the upstream") {
		t.Errorf("upstream_tls with no https:// upstream: %v", err)
	}
}

// TestOverLimitTrailerNotAnnounced: a client's request trailers, which
// ReverseProxy never sends on, are not announced to the upstream either.
// A Trailer naming an over_limit header reached it as r.Trailer's key,
// over HTTP/1.1 (a chunked body longer than the buffer) and HTTP/2.
func TestOverLimitTrailerNotAnnounced(t *testing.T) {
	body := strings.Repeat("a", DefaultBodyBuffer+1)
	raw := fmt.Sprintf("POST /other HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: chunked\r\nTrailer: X-Quota-Exceeded\r\n\r\n%x\r\n%s\r\n0\r\nX-Quota-Exceeded: billed\r\n\r\n", len(body), body)
	check := func(t *testing.T, up *recUpstream, n int) {
		t.Helper()
		got := up.take()
		if len(got) != n {
			t.Fatalf("the upstream got %d requests, want %d", len(got), n)
		}
		for _, r := range got {
			if len(r.Trailer) > 0 || len(r.Body) != len(body) {
				t.Errorf("%s: the upstream got trailers %q and %d bytes, want none and %d", r.URI, r.Trailer, len(r.Body), len(body))
			}
		}
	}
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, stripRules)
			if resp, _ := rawExchange(t, addr, raw); resp.StatusCode != 200 {
				t.Fatalf("%d", resp.StatusCode)
			}
			check(t, up, 1)
		})
	}
	for _, edge := range h2Edges {
		t.Run(edge, func(t *testing.T) {
			up := newRecUpstream(t, nil)
			g := startH2(t, transports[0], edge, up.URL, stripRules)
			fields := []string{":method", "POST", ":scheme", g.scheme(), ":authority", "gw.test", ":path", "/other", "trailer", "x-quota-exceeded"}
			if a := withBody(fields, []byte(body), "x-quota-exceeded", "billed")(g.dial(t)); a.status != 200 {
				t.Fatalf("%d", a.status)
			}
			check(t, up, 1)
		})
	}
}

// TestOverLimitPipelined: requests pipelined on one connection each get
// their own verdict. The header the gateway set on one over the limit is
// not carried to the next, and a client's copy nominated in Connection
// never reaches the upstream, on every transport.
func TestOverLimitPipelined(t *testing.T) {
	const rules = `rules:
  - name: monthly
    match: {path: /limited}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
    over_limit: {action: forward, header: X-Quota-Exceeded}
`
	reqs := []string{
		"GET /limited HTTP/1.1\r\nHost: gw.test\r\n\r\n",
		"GET /limited HTTP/1.1\r\nHost: gw.test\r\n\r\n",
		"GET /other HTTP/1.1\r\nHost: gw.test\r\nX-Quota-Exceeded: forged\r\nConnection: X-Quota-Exceeded\r\n\r\n",
		"GET /limited HTTP/1.1\r\nHost: gw.test\r\nConnection: keep-alive, X-Quota-Exceeded\r\nX-Quota-Exceeded: forged\r\n\r\n",
		"GET /other HTTP/1.1\r\nHost: gw.test\r\n\r\n",
	}
	want := []string{"", "monthly", "", "monthly", ""}
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, rules)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(strings.Join(reqs, ""))); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for i := range reqs {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer %d: %v", i+1, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("answer %d: %d", i+1, resp.StatusCode)
				}
			}
			got := up.take()
			if len(got) != len(want) {
				t.Fatalf("the upstream got %d requests, want %d", len(got), len(want))
			}
			for i, r := range got {
				if vs := r.Header.Values("X-Quota-Exceeded"); strings.Join(vs, "|") != want[i] {
					t.Errorf("request %d (%s): X-Quota-Exceeded %q, want %q", i+1, r.URI, vs, want[i])
				}
			}
		})
	}
}
