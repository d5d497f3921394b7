package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/memstore"
)

func newProcess(t *testing.T) (*Process, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := New(path, nil)
	open := func(context.Context, *slog.Logger) (Opened, error) {
		s := memstore.New()
		return Opened{Store: s, Closer: s}, nil
	}
	if _, err := p.OpenStore(context.Background(), open); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, path
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", "test")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// A request in flight on each server finishes before Run returns, and the
// admin listener answers /readyz while the process serves.
func TestRunDrainsEveryServer(t *testing.T) {
	p, _ := newProcess(t)
	release := make(chan struct{})
	var inFlight atomic.Int32
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		inFlight.Add(1)
		<-release
		io.WriteString(w, "done")
	})
	ln1, ln2, admin := listen(t), listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, Run{Name: "test", Admin: admin, Watch: -1, ShutdownTimeout: time.Minute,
			Servers: []Server{HTTP(&http.Server{Handler: slow}, ln1), HTTP(&http.Server{Handler: slow}, ln2)}})
	}()
	eventually(t, "readyz answers 200", func() bool {
		code, _, _ := get("http://" + admin.Addr().String() + "/readyz")
		return code == http.StatusOK
	})
	bodies := make(chan string, 2)
	for _, ln := range []net.Listener{ln1, ln2} {
		go func() {
			_, body, err := get("http://" + ln.Addr().String())
			if err != nil {
				body = err.Error()
			}
			bodies <- body
		}()
	}
	eventually(t, "both requests are in flight", func() bool { return inFlight.Load() == 2 })
	cancel()
	eventually(t, "the process is no longer ready", func() bool { return p.Ready() != nil })
	close(release)
	for range 2 {
		if b := <-bodies; b != "done" {
			t.Errorf("a request in flight got %q, want its answer", b)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

type failing struct{ stopped chan struct{} }

func (f failing) Serve() error                      { return errors.New("accept: boom") }
func (f failing) Shutdown(context.Context) error    { close(f.stopped); return nil }
func (blocking) Serve() error                       { select {} }
func (blocking) Shutdown(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

type blocking struct{}

// A server that fails stops the others and Run returns its error.
func TestRunReturnsAServersError(t *testing.T) {
	p, _ := newProcess(t)
	ln := listen(t)
	f := failing{make(chan struct{})}
	err := p.Run(context.Background(), Run{Name: "test", Watch: -1, Servers: []Server{f, HTTP(&http.Server{}, ln)}})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Run = %v, want the failed server's error", err)
	}
	select {
	case <-f.stopped:
	default:
		t.Error("the failed server was not shut down")
	}
	eventually(t, "the other server stops listening", func() bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

// The shutdown timeout bounds a server that does not drain.
func TestRunShutdownTimeout(t *testing.T) {
	p, _ := newProcess(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := p.Run(ctx, Run{Name: "test", Watch: -1, ShutdownTimeout: 50 * time.Millisecond, Servers: []Server{blocking{}}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want the shutdown's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Run took %v with a 50ms shutdown timeout", d)
	}
}

// A change to the file reloads it; a failed reload is counted and not
// retried until the file changes again.
func TestWatchReloads(t *testing.T) {
	p, path := newProcess(t)
	var calls atomic.Int32
	fail := atomic.Bool{}
	reload := func() error {
		return p.Reload(func() (int, []any, error) {
			calls.Add(1)
			if fail.Load() {
				return 0, nil, errors.New("bad file")
			}
			return 3, nil, nil
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, Run{Name: "test", Watch: time.Millisecond, Reload: reload, Servers: []Server{HTTP(&http.Server{}, listen(t))}})
	}()
	replace(t, path, "a: 2\n")
	eventually(t, "the change is reloaded", func() bool { return calls.Load() == 1 })
	if got := reloads(t, p, "success"); got != 1 {
		t.Errorf("successful reloads = %v, want 1", got)
	}
	fail.Store(true)
	replace(t, path, "a: 3\n")
	eventually(t, "the failure is counted", func() bool { return reloads(t, p, "failure") == 1 })
	// The bad content is taken as loaded, so polls do not retry it.
	if p.watcher.Changed() {
		t.Error("a failed file counts as changed: every poll would retry it")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// reloads reads ratekeeper_config_reloads_total{result} from p's registry.
func reloads(t *testing.T, p *Process, result string) float64 {
	t.Helper()
	mfs, err := p.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ratekeeper_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// replace swaps the file at path for one holding content, at once, as an
// editor or a Kubernetes ConfigMap does: a poll never sees it half written.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
