package gateway

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
	"github.com/ratekeeper/ratekeeper/gateway/internal/upstream"
)

// testStoreTimeout is the store timeout of a test gateway whose file sets
// none.
const testStoreTimeout = 10 * time.Second

// storeTimeoutSet matches a YAML that sets the store's timeout, not
// shutdown_timeout or body_timeout.
var storeTimeoutSet = regexp.MustCompile(`(^|[^A-Za-z_])timeout:`)

func newTestGateway(tb testing.TB, yaml string) *Gateway {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		tb.Fatal(err)
	}
	var o Options
	if !storeTimeoutSet.MatchString(yaml) {
		// Not a test of timeouts: a store call may take as long as a
		// loaded machine needs, never the failure policy's answer.
		o.Store.Timeout = testStoreTimeout
	}
	g, err := New(context.Background(), path, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.proc.Close() })
	hook(g)
	g.logger = slog.New(panicLog{g.logger.Handler()}) // before Run, which gives net/http its log
	noRecoveredPanics(tb)
	return g
}

func TestReloadKeepsOldRulesOnBadFile(t *testing.T) {
	g := newTestGateway(t, "upstream: builtin:demo\nrules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n")
	if err := os.WriteFile(g.path, []byte("rules: [{name: a, limit: {algorithm: x}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err == nil || !strings.Contains(err.Error(), "rules[0].limit.algorithm") {
		t.Fatalf("reload error %v", err)
	}
	if got := g.mw.Rules().Rules; len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("rules after a bad reload: %v", got)
	}
}

func TestMissingUpstream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(path, []byte("rules: []\n"), 0o644)
	if _, err := New(context.Background(), path, Options{}); err == nil || !strings.Contains(err.Error(), "upstream") {
		t.Fatalf("err %v", err)
	}
}

// BenchmarkProxy is the gateway's request path over loopback: client ->
// gateway (50 rules, 3 match) -> upstream, in one process.
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }))
	defer up.Close()
	var y strings.Builder
	y.WriteString("upstream: " + up.URL + "\nrules:\n")
	y.WriteString("  - name: per-ip\n    key: [ip]\n    limit: {algorithm: leaky_bucket, rate: 1000000, period: 1s, burst: 1000}\n")
	g := newTestGateway(b, y.String())
	gw := httptest.NewServer(g.Handler())
	defer gw.Close()
	getParallel(b, gw.URL+"/v1/items/7")
}

// getParallel has 16 clients a core GET url, each request's answer read
// whole and required to be 200, for b.N requests in all.
func getParallel(b *testing.B, url string) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	getParallelWith(b, &http.Client{Transport: tr}, url)
}

// getParallelWith is getParallel through c.
func getParallelWith(b *testing.B, c *http.Client, url string) {
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d %v", resp.StatusCode, resp.Header)
				return
			}
		}
	})
}

// BenchmarkFastPath is BenchmarkProxy through a listening gateway whose
// plain HTTP/1.1 requests take the fast path (client_transport: fast) and
// the direct transport: client -> fast path -> upstream, in one process.
func BenchmarkFastPath(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }))
	defer up.Close()
	rule := "rules:\n  - name: per-ip\n    key: [ip]\n    limit: {algorithm: leaky_bucket, rate: 1000000, period: 1s, burst: 1000}\n"
	g := runGateway(b, "fast", up.URL, rule)
	getParallel(b, "http://"+g.Addr().String()+"/v1/items/7")
	if n := handOffCount(g.Addr().String()); n != 0 {
		b.Errorf("%d connections handed to net/http: the benchmark did not measure the fast path", n)
	}
}

func TestUpstreamTransport(t *testing.T) {
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	for _, tc := range []struct {
		setting string
		conns   int64 // connections the upstream sees for 3 requests
	}{{"", 1}, {"direct", 1}, {"standard", 1}} {
		g := newTestGateway(t, "upstream: "+up.URL+"\nupstream_transport: "+tc.setting+"\nrules: []\n")
		rp := g.upstreamProxy
		_, direct := rp.Transport.(*upstream.Transport)
		if want := tc.setting != "standard"; direct != want {
			t.Errorf("upstream_transport %q: direct %v, want %v", tc.setting, direct, want)
		}
		before := up.Conns.Load()
		for range 3 {
			w := httptest.NewRecorder()
			g.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
			if w.Code != 200 || w.Body.String() != "ok" {
				t.Errorf("upstream_transport %q: %d %q", tc.setting, w.Code, w.Body)
			}
		}
		if n := up.Conns.Load() - before; n != tc.conns {
			t.Errorf("upstream_transport %q: %d connections for 3 requests", tc.setting, n)
		}
	}
}

// TestUpstreamWithQuery: an upstream URL with a query, which net/http
// merges into each request's and the fast path cannot, leaves every
// connection to net/http, which sends the merged query.
func TestUpstreamWithQuery(t *testing.T) {
	queries := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.RawQuery
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	g := runGateway(t, "fast", up.URL+"/?k=v", "")
	resp, err := http.Get("http://" + g.Addr().String() + "/x?a=b")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if q := <-queries; q != "k=v&a=b" {
		t.Errorf("the upstream got the query %q, want k=v&a=b", q)
	}
}

func TestUpstreamDownIs502(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	addr := up.URL
	up.Close()
	g := newTestGateway(t, "upstream: "+addr+"\nrules: []\n")
	w := httptest.NewRecorder()
	g.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "unreachable") {
		t.Errorf("%d %q", w.Code, w.Body)
	}
}

// TestConnectionsMetric counts client connections by the server that read
// them: a plain request stays on the fast path, an HTTP/1.0 one is handed
// to net/http (and counts under both); with client_transport: standard
// every connection is net/http's.
func TestConnectionsMetric(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	for _, tc := range []struct {
		transport     string
		fast, nethttp float64
	}{{"fast", 2, 1}, {"standard", 0, 2}} {
		g := runGateway(t, tc.transport, up.URL, "")
		for _, req := range []string{
			"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			"GET /b HTTP/1.0\r\nHost: x\r\n\r\n",
		} {
			c, err := net.Dial("tcp", g.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, req)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s: %q: %v %v", tc.transport, req, resp, err)
			}
			c.Close()
		}
		fast := testutil.ToFloat64(g.metrics.ConnectionCounter("fast"))
		nethttp := testutil.ToFloat64(g.metrics.ConnectionCounter("net_http"))
		if fast != tc.fast || nethttp != tc.nethttp {
			t.Errorf("client_transport %s: connections fast %v, net_http %v; want %v, %v", tc.transport, fast, nethttp, tc.fast, tc.nethttp)
		}
	}
}

// TestFastPathShutdown: on shutdown an idle keep-alive connection of the
// fast path is closed at once, and a request in flight finishes, told that
// its connection closes after it.
func TestFastPathShutdown(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	released := false
	defer func() {
		if !released {
			close(release) // a failed test must not leave the upstream's handler blocked
		}
	}()
	path := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(path, []byte("listen: 127.0.0.1:0\nwatch: -1s\nshutdown_timeout: 30s\nupstream: "+up.URL+"\n"), 0o644)
	g, err := New(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for g.Addr() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", g.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	// An idle keep-alive connection, after one request.
	idle, idleR := dial()
	io.WriteString(idle, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(idleR, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	} else {
		io.ReadAll(resp.Body)
	}
	// A request in flight.
	busy, busyR := dial()
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-arrived
	cancel()
	// The idle connection is closed without waiting for the slow request.
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := idleR.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection during shutdown: read %d, %v; want EOF", n, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) before the request in flight finished", err)
	default:
	}
	close(release)
	released = true
	resp, err := http.ReadResponse(busyR, nil)
	if err != nil || resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("request in flight: %v %v; want 200 with Connection: close", resp, err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Fatalf("request in flight: body %q", b)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the last request")
	}
}

// An empty file (truncated, not yet written, or emptied by mistake) is not
// a config without rules: the reload fails and the rules keep serving.
func TestReloadRefusesAnEmptyFile(t *testing.T) {
	g := newTestGateway(t, "upstream: builtin:demo\nrules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n")
	if err := os.WriteFile(g.path, []byte("\n  \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("reload of an empty file: %v", err)
	}
	if n := len(g.mw.Rules().Rules); n != 1 {
		t.Fatalf("%d rules after the failed reload, want 1", n)
	}
}
