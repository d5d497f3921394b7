package main

// End-to-end tests: they build the ratekeeper binary, run `ratekeeper proxy`
// as a real process in front of a real HTTP upstream on loopback, and talk
// to it over HTTP.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// proc is a running `ratekeeper proxy`.
type proc struct {
	*process
	addr   string // the gateway's host:port
	admin  string // the admin listener's host:port
	config string
}

// startProxy writes yaml to a config file and starts the gateway on free
// loopback ports.
func startProxy(t *testing.T, yaml string, args ...string) *proc {
	t.Helper()
	config := filepath.Join(t.TempDir(), "ratekeeper.yaml")
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return startProxyFile(t, config, args...)
}

// clientTransport, when set, is passed as --client-transport to the
// gateways the tests start.
var clientTransport string

func startProxyFile(t *testing.T, config string, args ...string) *proc {
	t.Helper()
	args = append([]string{"proxy", "--config", config, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"}, args...)
	if clientTransport != "" {
		args = append(args, "--client-transport", clientTransport)
	}
	p, m := startProcess(t, "gateway listening", args...)
	return &proc{process: p, addr: fmt.Sprint(m["addr"]), admin: fmt.Sprint(m["admin"]), config: config}
}

func (p *proc) url(path string) string { return "http://" + p.addr + path }

// do sends one request through the gateway.
func (p *proc) do(method, path string, hdr ...string) *http.Response {
	p.t.Helper()
	req, err := http.NewRequest(method, p.url(path), nil)
	if err != nil {
		p.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
}

// metric reads one sample from the admin listener's /metrics, or -1.
func (p *proc) metric(series string) float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return -1
}

// waitFor polls cond until it holds or 20 seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// upstream is the API behind the gateway: it echoes what it saw.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	hits []hit
}

type hit struct {
	path string
	xff  string
	at   time.Time
}

func newUpstream(t *testing.T, extra func(mux *http.ServeMux)) *upstream {
	u := &upstream{}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits = append(u.hits, hit{r.URL.Path, r.Header.Get("X-Forwarded-For"), time.Now()})
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "upstream %s %s\n", r.Method, r.URL.Path)
	})
	if extra != nil {
		extra(mux)
	}
	u.Server = httptest.NewServer(mux)
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) Hits() []hit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]hit(nil), u.hits...)
}

func TestE2ELimitHeadersAndBody(t *testing.T) {
	up := newUpstream(t, nil)
	p := startProxy(t, `
upstream: `+up.URL+`
rules:
  - name: posts-per-user
    match: {methods: [POST], path: /v1/posts}
    key: [header:X-User-ID]
    limit: {algorithm: sliding_log, rate: 3, period: 1h}
`)
	for i := range 3 {
		resp := p.do("POST", "/v1/posts", "X-User-ID", "alice")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i+1, resp.StatusCode)
		}
		h := resp.Header
		// The log's reset is an hour after its oldest entry (rounded up to
		// whole seconds: 3600 or, a microsecond past, 3601).
		reset := h.Get("X-RateLimit-Reset")
		if h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != strconv.Itoa(2-i) || (reset != "3600" && reset != "3601") {
			t.Errorf("request %d: %v", i+1, h)
		}
		if got := h.Get("RateLimit-Policy"); got != `"posts-per-user";q=3;w=3600` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		if got, want := h.Get("RateLimit"), fmt.Sprintf(`"posts-per-user";r=%d;t=%s`, 2-i, reset); got != want {
			t.Errorf("RateLimit %q, want %q", got, want)
		}
	}
	resp := p.do("POST", "/v1/posts", "X-User-ID", "alice")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d", resp.StatusCode)
	}
	h := resp.Header
	ra, _ := strconv.Atoi(h.Get("Retry-After"))
	if ra < 3599 || ra > 3600 || h.Get("X-RateLimit-Retry-After") != h.Get("Retry-After") || h.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("429 headers %v", h)
	}
	if h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("content type %q", h.Get("Content-Type"))
	}
	var prob struct {
		Status     int    `json:"status"`
		Title      string `json:"title"`
		Detail     string `json:"detail"`
		Rule       string `json:"rule"`
		RetryAfter int    `json:"retry_after"`
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &prob); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if prob.Status != 429 || prob.Rule != "posts-per-user" || prob.RetryAfter != ra || !strings.Contains(prob.Detail, "posts-per-user") {
		t.Errorf("problem %+v", prob)
	}
	if n := len(up.Hits()); n != 3 {
		t.Errorf("upstream saw %d requests, want 3", n)
	}
	if resp := p.do("POST", "/v1/posts", "X-User-ID", "bob"); resp.StatusCode != 200 {
		t.Errorf("bob: %d", resp.StatusCode)
	}
	if resp := p.do("GET", "/v1/posts", "X-User-ID", "alice"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Errorf("unmatched GET: %d %v", resp.StatusCode, resp.Header)
	}
	waitFor(t, "metrics", func() bool {
		return p.metric(`ratekeeper_decisions_total{result="limited",rule="posts-per-user"}`) == 1 &&
			p.metric(`ratekeeper_decisions_total{result="allowed",rule="posts-per-user"}`) == 4
	})
	if p.metric(`ratekeeper_store_duration_seconds_count{op="take_all"}`) < 5 {
		t.Error("store latency not recorded")
	}
}

func TestE2ESpoofedForwardedForIgnored(t *testing.T) {
	up := newUpstream(t, nil)
	p := startProxy(t, `
upstream: `+up.URL+`
client_ip: {trusted_proxies: [10.0.0.0/8]}
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: fixed_window, rate: 2, period: 24h}
`)
	for i := range 5 {
		resp := p.do("GET", "/", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
		want := 200
		if i >= 2 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d with a fresh X-Forwarded-For: %d, want %d", i, resp.StatusCode, want)
		}
	}
	for _, h := range up.Hits() {
		if h.xff != "127.0.0.1" {
			t.Errorf("upstream saw X-Forwarded-For %q: the spoofed hop was passed on", h.xff)
		}
	}
}

func TestE2EShadowAndAccess(t *testing.T) {
	up := newUpstream(t, nil)
	p := startProxy(t, `
upstream: `+up.URL+`
access: {deny: [127.0.0.2/32]}
rules:
  - name: trial
    mode: shadow
    limit: {algorithm: fixed_window, rate: 1, period: 24h}
`)
	for i := range 3 {
		resp := p.do("GET", "/x")
		if resp.StatusCode != 200 {
			t.Fatalf("shadow refused request %d: %d", i, resp.StatusCode)
		}
		if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"trial";r=0;`) {
			t.Errorf("RateLimit %q", got)
		}
	}
	waitFor(t, "shadow metrics", func() bool {
		return p.metric(`ratekeeper_decisions_total{result="shadow_limited",rule="trial"}`) == 2
	})
	if !strings.Contains(p.Logs(), "shadow rule would refuse") {
		t.Error("shadow refusal not logged")
	}
	// A client on the deny list: connect from 127.0.0.2.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	resp, err := c.Get(p.url("/x"))
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2 here: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("denied client: %d", resp.StatusCode)
	}
}

func TestE2EQueue(t *testing.T) {
	up := newUpstream(t, nil)
	p := startProxy(t, `
upstream: `+up.URL+`
rules:
  - name: paced
    mode: queue
    max_delay: 1200ms
    limit: {algorithm: leaky_bucket, rate: 2, period: 1s, burst: 20}
`)
	p.do("GET", "/warmup") // takes the slot now; the next ones queue behind it
	const n = 8
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { codes[i] = p.do("GET", "/q").StatusCode })
	}
	wg.Wait()
	var ok, limited int
	for _, c := range codes {
		switch c {
		case 200:
			ok++
		case 429:
			limited++
		default:
			t.Fatalf("status %d", c)
		}
	}
	// Slots are 500ms apart: the slots 0.5s and 1s after the warm-up are
	// within max_delay (1.2s), the next (1.5s) is not. Arrivals spread over
	// more than 300ms would fit a third.
	if ok < 2 || ok > 3 || limited != n-ok {
		t.Fatalf("%d passed, %d refused: %v", ok, limited, codes)
	}
	var times []time.Time
	for _, h := range up.Hits() {
		times = append(times, h.at)
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 450*time.Millisecond {
			t.Errorf("queued requests reached the upstream %v apart, want 500ms", gap)
		}
	}
	waitFor(t, "queued metric", func() bool {
		return p.metric(`ratekeeper_decisions_total{result="queued",rule="paced"}`) == float64(ok) &&
			p.metric(`ratekeeper_decisions_total{result="limited",rule="paced"}`) == float64(limited)
	})
}

func TestE2EHotReload(t *testing.T) {
	up := newUpstream(t, nil)
	cfg := func(bLimit int) string {
		return fmt.Sprintf(`
upstream: %s
watch: 50ms
rules:
  - name: a
    match: {path: /a}
    limit: {algorithm: fixed_window, rate: 1, period: 24h}
  - name: b
    match: {path: /b}
    limit: {algorithm: fixed_window, rate: %d, period: 24h}
`, up.URL, bLimit)
	}
	p := startProxy(t, cfg(1))
	for _, path := range []string{"/a", "/b"} {
		if c := p.do("GET", path).StatusCode; c != 200 {
			t.Fatalf("%s: %d", path, c)
		}
		if c := p.do("GET", path).StatusCode; c != 429 {
			t.Fatalf("%s twice: %d", path, c)
		}
	}
	// A bad file: logged, counted, and the old rules keep serving.
	if err := os.WriteFile(p.config, []byte("rules:\n  - name: a\n    limit: {algorithm: nope}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failed reload", func() bool { return p.metric(`ratekeeper_config_reloads_total{result="failure"}`) == 1 })
	if c := p.do("GET", "/a").StatusCode; c != 429 {
		t.Fatalf("after a bad reload /a: %d", c)
	}
	if !strings.Contains(p.Logs(), "config reload failed") || !strings.Contains(p.Logs(), "rules[0].limit.algorithm") {
		t.Error("the bad file's error was not logged with its field")
	}
	// A good file: b's limit changes (fresh counters), a's does not (keeps
	// its count).
	if err := os.WriteFile(p.config, []byte(cfg(3)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload", func() bool { return p.metric(`ratekeeper_config_reloads_total{result="success"}`) == 1 })
	if c := p.do("GET", "/a").StatusCode; c != 429 {
		t.Errorf("unchanged rule lost its counter: %d", c)
	}
	for i := range 3 {
		if c := p.do("GET", "/b").StatusCode; c != 200 {
			t.Errorf("changed rule, request %d: %d", i, c)
		}
	}
	if c := p.do("GET", "/b").StatusCode; c != 429 {
		t.Errorf("changed rule past its new limit: %d", c)
	}
	if p.metric("ratekeeper_config_rules") != 2 {
		t.Error("rules gauge")
	}
}

func TestE2EReloadOnSIGHUP(t *testing.T) {
	up := newUpstream(t, nil)
	p := startProxy(t, `
upstream: `+up.URL+`
watch: -1s
rules:
  - name: a
    limit: {algorithm: fixed_window, rate: 1, period: 24h}
`)
	p.do("GET", "/")
	if c := p.do("GET", "/").StatusCode; c != 429 {
		t.Fatal(c)
	}
	os.WriteFile(p.config, []byte("upstream: "+up.URL+"\nwatch: -1s\nrules: []\n"), 0o644)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SIGHUP reload", func() bool { return p.metric(`ratekeeper_config_reloads_total{result="success"}`) == 1 })
	if c := p.do("GET", "/").StatusCode; c != 200 {
		t.Errorf("after removing the rule: %d", c)
	}
	if v := p.metric(`ratekeeper_decisions_total{result="allowed",rule="a"}`); v != -1 {
		t.Errorf("the removed rule's series is still exported (%v)", v)
	}
}

func TestE2EUpstreamDown(t *testing.T) {
	// Port 1 (tcpmux) has no listener. A port freed for the test was taken
	// again, once, by the proxy's own admin listener, which answered 404.
	const addr = "127.0.0.1:1"
	p := startProxy(t, "upstream: http://"+addr+"\n")
	resp := p.do("GET", "/")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "unreachable") || !strings.Contains(string(body), addr) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestE2EStreamingAndWebSocket(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(mux *http.ServeMux) {
		mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			<-release
			io.WriteString(w, "second\n")
		})
		mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") != "websocket" {
				http.Error(w, "want an upgrade", 400)
				return
			}
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			rw.Flush()
			line, _ := rw.ReadString('\n')
			rw.WriteString("echo " + line)
			rw.Flush()
		})
	})
	p := startProxy(t, `
upstream: `+up.URL+`
rules:
  - name: all
    limit: {algorithm: token_bucket, rate: 100, period: 1s}
`)
	// The first chunk arrives while the upstream is still writing.
	resp, err := http.Get(p.url("/stream"))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "first\n" {
		t.Fatalf("first chunk %q %v", first, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if string(rest) != "second\n" {
		t.Fatalf("rest %q", rest)
	}
	// A WebSocket upgrade passes, and bytes flow both ways.
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	cr := bufio.NewReader(conn)
	wsResp, err := http.ReadResponse(cr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if wsResp.StatusCode != 101 || wsResp.Header.Get("RateLimit-Policy") == "" {
		t.Fatalf("upgrade: %d %v", wsResp.StatusCode, wsResp.Header)
	}
	io.WriteString(conn, "hello\n")
	echo, err := cr.ReadString('\n')
	if err != nil || echo != "echo hello\n" {
		t.Fatalf("echo %q %v", echo, err)
	}
}

func TestE2EGracefulShutdown(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	up := newUpstream(t, func(mux *http.ServeMux) {
		mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-release
			io.WriteString(w, "finished")
		})
	})
	p := startProxy(t, "upstream: "+up.URL+"\nshutdown_timeout: 20s\n")
	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get(p.url("/slow"))
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-arrived
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shutdown to begin", func() bool { return strings.Contains(p.Logs(), "shutting down") })
	// New connections are refused while the old request finishes.
	waitFor(t, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(release)
	r := <-res
	if r.err != nil || r.code != 200 || r.body != "finished" {
		t.Fatalf("in-flight request: %+v", r)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not exit")
	}
	if p.err != nil {
		t.Fatalf("exit: %v", p.err)
	}
}

func TestE2EAdminEndpoints(t *testing.T) {
	p := startProxy(t, "upstream: builtin:demo\n")
	// Ready a moment after the listening line: the servers start serving
	// after it is logged, and /readyz says when.
	waitFor(t, "/readyz 200", func() bool {
		resp, err := http.Get("http://" + p.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get("http://" + p.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	if p.metric("go_goroutines") <= 0 {
		t.Error("no runtime metrics")
	}
}

// TestE2EQuickstart runs README's command against examples/quickstart.yaml
// and its curl loop: five requests pass, the sixth is refused.
func TestE2EQuickstart(t *testing.T) {
	p := startProxyFile(t, "../../examples/quickstart.yaml")
	for i := range 7 {
		resp := p.do("GET", "/v1/hello")
		want := 200
		if i >= 5 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		if i == 0 {
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), "ratekeeper demo") {
				t.Errorf("demo upstream body %q", b)
			}
		}
	}
}

// TestE2ERedisSharedAcrossInstances runs two gateways on one Redis with
// examples/redis.yaml: together they admit the limit, not twice it.
func TestE2ERedisSharedAcrossInstances(t *testing.T) {
	url := redistest.Server(t)
	up := newUpstream(t, nil)
	args := []string{"--store", url, "--store-timeout", "10s", "--upstream", up.URL}
	p1 := startProxyFile(t, "../../examples/redis.yaml", args...)
	p2 := startProxyFile(t, "../../examples/redis.yaml", args...)
	passed := 0
	for i := range 12 {
		p := p1
		if i%2 == 1 {
			p = p2
		}
		if p.do("POST", "/v1/orders", "X-API-Key", "k1").StatusCode == 200 {
			passed++
		}
	}
	if passed != 5 {
		t.Fatalf("%d of 12 passed across two gateways, want 5", passed)
	}
}

func TestE2ECheck(t *testing.T) {
	out, err := exec.Command(binary(t), "check", "--config", "../../examples/quickstart.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "valid") || !strings.Contains(string(out), "posts-per-user: POST, path = /v1/posts") {
		t.Fatalf("%v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: 1, period: 1y}\n"), 0o644)
	cmd := exec.Command(binary(t), "check", "--config", bad)
	out, err = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "bad.yaml:3: rules[0].limit.period") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestE2EStandardClientTransport runs the tests of what clients and the
// upstream see again with client_transport: standard, where net/http
// serves every connection: the default fast path and net/http must behave
// alike.
func TestE2EStandardClientTransport(t *testing.T) {
	clientTransport = "standard"
	defer func() { clientTransport = "" }()
	for name, test := range map[string]func(*testing.T){
		"LimitHeadersAndBody":        TestE2ELimitHeadersAndBody,
		"SpoofedForwardedForIgnored": TestE2ESpoofedForwardedForIgnored,
		"ShadowAndAccess":            TestE2EShadowAndAccess,
		"Queue":                      TestE2EQueue,
		"UpstreamDown":               TestE2EUpstreamDown,
		"StreamingAndWebSocket":      TestE2EStreamingAndWebSocket,
		"GracefulShutdown":           TestE2EGracefulShutdown,
	} {
		t.Run(name, test)
	}
}

// TestE2EStartsWithRedisDown: a gateway whose store URL points at a closed
// loopback port starts anyway (docs/gateway.md, store) and answers by
// on_error: deny gives 503, allow lets the request through.
func TestE2EStartsWithRedisDown(t *testing.T) {
	const closed = "127.0.0.1:1" // nothing listens on port 1: connections are refused
	up := newUpstream(t, nil)
	for policy, want := range map[string]int{"deny": 503, "allow": 200} {
		t.Run(policy, func(t *testing.T) {
			p := startProxy(t, `upstream: `+up.URL+`
store: {url: "redis://`+closed+`/0", timeout: 100ms, on_error: `+policy+`}
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: token_bucket, rate: 5, period: 10s}
`)
			if !strings.Contains(p.Logs(), "does not answer") {
				t.Errorf("no warning that Redis does not answer:\n%s", p.Logs())
			}
			if resp := p.do("GET", "/v1/hello"); resp.StatusCode != want {
				t.Fatalf("with Redis down and on_error %s: %d, want %d", policy, resp.StatusCode, want)
			}
		})
	}
}
