// Package server is the process that both of ratekeeper's servers are,
// the gateway (ratekeeper proxy) and the decision service (ratekeeper
// serve). It holds a store, opened by the Opener it is given, instrumented
// and reporting its health. An admin listener serves /metrics, /healthz
// and /readyz. The configuration is watched and reloaded, each reload
// logged and counted. One graceful shutdown has one default timeout. What
// each server answers is its own; how it starts, reloads and stops is here.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/internal/server/watch"
)

// Defaults of both servers.
const (
	// DefaultWatch is how often the configuration is polled for changes.
	DefaultWatch = 2 * time.Second
	// DefaultShutdownTimeout bounds a graceful shutdown. It is under
	// Kubernetes' default grace period of 30 seconds, so that requests in
	// flight finish and the store closes before the kubelet's SIGKILL.
	DefaultShutdownTimeout = 25 * time.Second
)

// Process is what a server keeps for its whole life: its logger, its
// metrics, its store and the configuration it watches. Create it with New
// before loading the configuration, so that a change made while it loads
// is seen.
type Process struct {
	// Logger receives the process's logs; never nil.
	Logger *slog.Logger
	// Registry holds the process's metrics, served on the admin listener.
	Registry *prometheus.Registry
	// Metrics records decisions, reloads and the store's health.
	Metrics *metrics.Metrics

	path      string
	watcher   *watch.Watcher
	store     io.Closer
	raw       ratekeeper.Store // as opened, before instrumentation
	closeOnce sync.Once
	mu        sync.Mutex // serialises reloads
	ready     atomic.Bool
	last      atomic.Pointer[LoadResult]
}

// LoadResult is the outcome of a load of the configuration.
type LoadResult struct {
	At  time.Time
	Err error // nil: it serves
}

// LastLoad is the outcome of the configuration's last load: the first, or
// the last reload. Its At is zero before the first.
func (p *Process) LastLoad() LoadResult {
	if r := p.last.Load(); r != nil {
		return *r
	}
	return LoadResult{}
}

// New starts watching the configuration at path (a file or a directory of
// YAML files) and sets up the metrics. A nil logger discards the logs.
func New(path string, logger *slog.Logger) *Process {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	reg := metrics.NewRegistry()
	return &Process{Logger: logger, Registry: reg, Metrics: metrics.New(reg), path: path, watcher: watch.New(path)}
}

// Opened is a store as an Opener opened it.
type Opened struct {
	// Store decides.
	Store ratekeeper.Store
	// Closer releases the store; the process closes it once.
	Closer io.Closer
	// Health reads the store's health for the metrics.
	Health metrics.StoreHealth
}

// An Opener opens a process's store, logging to logger.
type Opener func(ctx context.Context, logger *slog.Logger) (Opened, error)

// OpenStore opens the process's store with open. The store it returns
// records each call's latency and errors, and the process reports the
// store's health; Run closes it.
func (p *Process) OpenStore(ctx context.Context, open Opener) (ratekeeper.Store, error) {
	o, err := open(ctx, p.Logger)
	if err != nil {
		return nil, err
	}
	p.store, p.raw = o.Closer, o.Store
	p.Metrics.CollectStore(o.Health)
	return p.Metrics.InstrumentStore(o.Store), nil
}

// Store is the store OpenStore opened, as it decides, without the
// instrumentation: what an admin's peek or reset goes through, so that
// neither counts as a decision.
func (p *Process) Store() ratekeeper.Store { return p.raw }

// Close closes the store, for a server that fails before Run; a second
// Close does nothing.
func (p *Process) Close() error {
	var err error
	p.closeOnce.Do(func() {
		if p.store != nil {
			err = p.store.Close()
		}
	})
	return err
}

// Loaded records the first configuration, of n rules.
func (p *Process) Loaded(n int) {
	p.Metrics.Loaded(n)
	p.last.Store(&LoadResult{At: time.Now()})
}

// Reload calls load, which reads and applies the configuration and
// returns how many rules it now serves and what to log about them. It logs
// and counts the outcome; a failed load must have changed nothing, and the
// log says the previous rules keep serving. Reloads run one at a time, and
// a configuration that fails is not tried again until it changes.
func (p *Process) Reload(load func() (rules int, attrs []any, err error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.watcher.Loaded()
	n, attrs, err := load()
	p.last.Store(&LoadResult{At: time.Now(), Err: err})
	if err != nil {
		p.Metrics.Reload(false, 0)
		p.Logger.Error("config reload failed; the previous rules keep serving", "config", p.path, "err", err)
		return err
	}
	p.Metrics.Reload(true, n)
	p.Logger.Info("config reloaded", append([]any{"config", p.path}, attrs...)...)
	return nil
}

// Ready reports nil while the process serves: after Run has started its
// servers and until it begins to shut down.
func (p *Process) Ready() error {
	if !p.ready.Load() {
		return errors.New("not serving")
	}
	return nil
}

// A Server is one listener's server. Serve runs until Shutdown, then
// returns nil; Shutdown stops it taking new work and waits for the work in
// flight until ctx is done.
type Server interface {
	Serve() error
	Shutdown(ctx context.Context) error
}

// HTTP serves srv on ln as a Server.
func HTTP(srv *http.Server, ln net.Listener) Server { return httpServer{srv, ln} }

type httpServer struct {
	srv *http.Server
	ln  net.Listener
}

func (s httpServer) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s httpServer) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Run is how a Process runs its servers.
type Run struct {
	// Name says what stops in the logs ("gateway").
	Name string
	// Servers serve the process's listeners.
	Servers []Server
	// Admin, when not nil, serves /metrics, /healthz and /readyz.
	Admin net.Listener
	// AdminRoutes, when not nil, serves every other path of the admin
	// listener (the gateway's and serve's inspect and reset endpoints).
	AdminRoutes http.Handler
	// Watch is how often the configuration is polled (DefaultWatch when
	// zero, never when negative); Reload is called when it changed.
	Watch  time.Duration
	Reload func() error
	// ShutdownTimeout bounds the graceful shutdown
	// (DefaultShutdownTimeout when zero).
	ShutdownTimeout time.Duration
}

// Run serves until ctx is done or a server fails, then shuts every server
// down gracefully at once, within one timeout, and closes the store. It
// returns the failed server's error, or the shutdown's.
func (p *Process) Run(ctx context.Context, r Run) error {
	defer p.Close()
	servers := r.Servers
	if r.Admin != nil {
		h := metrics.AdminHandler(p.Registry, p.Ready)
		if r.AdminRoutes != nil {
			mux := http.NewServeMux()
			for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
				mux.Handle(path, h)
			}
			mux.Handle("/", r.AdminRoutes)
			h = mux
		}
		admin := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers[:len(servers):len(servers)], HTTP(admin, r.Admin))
	}
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errc <- s.Serve() }()
	}
	p.ready.Store(true)

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	every := r.Watch
	if every == 0 {
		every = DefaultWatch
	}
	go p.watcher.Run(watchCtx, every, func() {
		p.Logger.Info("config changed", "config", p.path)
		_ = r.Reload()
	})

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	p.ready.Store(false)
	timeout := r.ShutdownTimeout
	if timeout == 0 {
		timeout = DefaultShutdownTimeout
	}
	p.Logger.Info("shutting down: finishing requests in flight", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	// The admin listener goes last: /metrics stays up while the others
	// drain.
	errs := make([]error, len(r.Servers))
	var wg sync.WaitGroup
	for i, s := range r.Servers {
		wg.Go(func() { errs[i] = s.Shutdown(sctx) })
	}
	wg.Wait()
	if len(servers) > len(r.Servers) {
		_ = servers[len(servers)-1].Shutdown(sctx)
	}
	if serveErr != nil {
		return serveErr
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	p.Logger.Info(r.Name + " stopped")
	return nil
}

// Listen listens on the TCP address addr; what names the listener in the
// error.
func Listen(addr, what string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listen: %w", what, err)
	}
	return ln, nil
}

// Addr holds a listener's address once it listens; the zero Addr is
// empty. It is safe for concurrent use.
type Addr struct{ p atomic.Pointer[net.Addr] }

// Set records a.
func (x *Addr) Set(a net.Addr) { x.p.Store(&a) }

// Get returns the address, or nil before Set.
func (x *Addr) Get() net.Addr {
	if a := x.p.Load(); a != nil {
		return *a
	}
	return nil
}

// String is the address, or "off" before Set.
func (x *Addr) String() string {
	if a := x.Get(); a != nil {
		return a.String()
	}
	return "off"
}
