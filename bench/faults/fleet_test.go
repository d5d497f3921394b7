package faults

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The fleet: three `ratekeeper proxy` processes and one `ratekeeper serve`
// on one Redis topology, in front of one upstream.

// The limits under test. hot is one API key that every gateway sees, far
// over its limit; cold are many keys near theirs.
const (
	hotRate   = 100 // per second, burst hotBurst
	hotBurst  = 100
	coldRate  = 20 // per second, fixed window
	serveRate = 50 // per second, serve's descriptor
	gateways  = 3
)

// buildDir is where binaryPath builds ratekeeper: TestMain makes it, and
// removes it when the tests are over (a CI machine that runs them again
// and again would otherwise fill up with binaries).
var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rk-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaryPath builds ratekeeper once per test binary.
var binaryPath = sync.OnceValues(func() (string, error) {
	path := filepath.Join(buildDir, "ratekeeper")
	out, err := exec.Command("go", "build", "-o", path, "github.com/ratekeeper/ratekeeper/cmd/ratekeeper").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return path, nil
})

// proc is one ratekeeper process: its command line, ports and log.
type proc struct {
	t        testing.TB
	name     string
	args     []string
	listen   string // the address clients use
	admin    string
	config   string
	logPath  string
	baseline struct{ goroutines, fds float64 }

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs the process and waits until its admin listener is ready.
func (p *proc) start() {
	p.t.Helper()
	bin, err := binaryPath()
	if err != nil {
		p.t.Fatal(err)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	waitFor(p.t, 15*time.Second, p.name+" ready", func() bool {
		select {
		case <-done:
			p.t.Fatalf("%s exited: %s", p.name, p.tail())
		default:
		}
		resp, err := http.Get("http://" + p.admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func (p *proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// signal sends sig; SIGKILL also waits for the process to be gone.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		p.cmd = nil
	}
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		<-done
	}
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// metrics scrapes the admin listener: the sum of the samples of each
// family named, by name (-1 when the scrape failed).
func (p *proc) metrics(names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, n := range names {
		out[n] = -1
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	for _, n := range names {
		out[n] = 0
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		family, _, _ := strings.Cut(name, "{")
		if _, ok := out[family]; !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64); err == nil {
			out[family] += v
		}
	}
	return out
}

// fleet is what a run starts on a topology.
type fleet struct {
	t        testing.TB
	dir      string
	proxies  []*proc
	serve    *proc
	upstream *http.Server
	mode     string
	storeURL string
}

// storeSection is the gateways' store: 50 ms per call, then the local
// fallback with a third of each limit per gateway.
func storeSection(url, mode string) string {
	return fmt.Sprintf("store: {url: %q, timeout: %v, on_error: local, instances: %d, mode: %s, sync_period: 100ms}\n", url, storeTimeout, gateways, mode)
}

// rulesSection is the gateways' rules; cold's rate is the one a reload
// changes.
func rulesSection(cold int) string {
	return fmt.Sprintf(`rules:
  - name: hot
    match: {path_prefix: /hot}
    key: [header:X-Api-Key]
    limit: {algorithm: token_bucket, rate: %d, period: 1s, burst: %d}
  - name: cold
    match: {path_prefix: /cold}
    key: [header:X-Api-Key]
    limit: {algorithm: fixed_window, rate: %d, period: 1s}
`, hotRate, hotBurst, cold)
}

func newFleet(t testing.TB, storeURL, mode string) *fleet {
	t.Helper()
	f := &fleet{t: t, dir: t.TempDir(), mode: mode, storeURL: storeURL}
	// The upstream: answers at once.
	up := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t, false)), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok\n")
	})}
	ln, err := net.Listen("tcp", up.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	f.upstream = up
	for i := range gateways {
		p := &proc{t: t, name: fmt.Sprintf("gateway-%d", i+1), listen: fmt.Sprintf("127.0.0.1:%d", freePort(t, false)), admin: fmt.Sprintf("127.0.0.1:%d", freePort(t, false))}
		p.config = filepath.Join(f.dir, p.name+".yaml")
		p.logPath = filepath.Join(f.dir, p.name+".log")
		f.writeConfig(p, coldRate)
		p.args = []string{"proxy", "--config", p.config, "--log-format", "json"}
		p.start()
		t.Cleanup(func() { p.signal(syscall.SIGKILL) })
		f.proxies = append(f.proxies, p)
	}
	domain := filepath.Join(f.dir, "domain.yaml")
	os.WriteFile(domain, fmt.Appendf(nil, "domain: faults\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: %d}\n", serveRate), 0o644)
	s := &proc{t: t, name: "serve", listen: fmt.Sprintf("127.0.0.1:%d", freePort(t, false)), admin: fmt.Sprintf("127.0.0.1:%d", freePort(t, false)), logPath: filepath.Join(f.dir, "serve.log")}
	s.args = []string{"serve", "--config", domain, "--grpc-listen", fmt.Sprintf("127.0.0.1:%d", freePort(t, false)), "--http-listen", s.listen, "--admin-listen", s.admin,
		"--store", storeURL, "--store-timeout", storeTimeout.String(), "--store-on-error", "local", "--store-mode", mode, "--store-sync-period", "100ms", "--log-format", "json"}
	s.start()
	t.Cleanup(func() { s.signal(syscall.SIGKILL) })
	f.serve = s
	return f
}

func (f *fleet) writeConfig(p *proc, cold int) {
	yaml := fmt.Sprintf("listen: %s\nadmin_listen: %s\nupstream: http://%s\nwatch: -1s\nclient: {max_conns_per_ip: -1}\n", p.listen, p.admin, f.upstream.Addr) +
		storeSection(f.storeURL, f.mode) + rulesSection(cold)
	if err := os.WriteFile(p.config, []byte(yaml), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// all is every process of the fleet.
func (f *fleet) all() []*proc { return append(append([]*proc{}, f.proxies...), f.serve) }

// fallbacks sums, over the live processes, the store errors and the
// decisions the fallback made.
func (f *fleet) fallbacks() (errs, decisions float64) {
	for _, p := range f.all() {
		if !p.alive() {
			continue
		}
		m := p.metrics("ratekeeper_store_fallback_errors_total", "ratekeeper_store_fallback_decisions_total")
		errs += max(0, m["ratekeeper_store_fallback_errors_total"])
		decisions += max(0, m["ratekeeper_store_fallback_decisions_total"])
	}
	return errs, decisions
}

// resources reads each process's goroutines and open files.
func (p *proc) resources() (goroutines, fds float64) {
	m := p.metrics("go_goroutines", "process_open_fds")
	return m["go_goroutines"], m["process_open_fds"]
}
