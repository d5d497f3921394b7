package rls

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

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/ratekeeper/ratekeeper/internal/metrics"
	"github.com/ratekeeper/ratekeeper/internal/watch"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// Defaults of ServerOptions.
const (
	DefaultGRPCListen      = "127.0.0.1:8081"
	DefaultHTTPListen      = "127.0.0.1:8080"
	DefaultAdminListen     = "127.0.0.1:9090"
	DefaultWatch           = 2 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
)

// streamWorkers is how many goroutines serve gRPC calls; a call that finds
// them all busy (waiting on the store) gets its own goroutine, as without
// workers. Idle workers cost their stacks only.
const streamWorkers = 512

// ServerOptions configure a Server. Zero values take the defaults.
type ServerOptions struct {
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// GRPCListen, HTTPListen and AdminListen are the listeners' addresses;
	// "-" turns the HTTP or admin listener off.
	GRPCListen, HTTPListen, AdminListen string
	// Store configures the store (memory by default).
	Store storeconfig.Config
	// AllOrNothing: see WithAllOrNothing.
	AllOrNothing bool
	// ResponseHeaders: see WithResponseHeaders.
	ResponseHeaders bool
	// MaxDescriptors and MaxEntries: see WithMaxDescriptors and
	// WithMaxEntries (DefaultMaxDescriptors and DefaultMaxEntries when
	// zero).
	MaxDescriptors, MaxEntries int
	// Watch is how often the configuration is polled for changes; negative
	// turns polling off (Reload still works).
	Watch time.Duration
	// ShutdownTimeout bounds the graceful shutdown.
	ShutdownTimeout time.Duration
}

// Server runs a Service on its gRPC, HTTP and admin listeners and reloads
// its configuration. Create it with NewServer, run it with Run.
type Server struct {
	path    string
	o       ServerOptions
	logger  *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	svc     *Service
	store   io.Closer

	mu      sync.Mutex     // serialises reloads
	watcher *watch.Watcher // what the configuration held when last loaded

	ready                   atomic.Bool
	grpcAddr, httpAddr, adm atomic.Pointer[net.Addr]
}

// NewServer loads the configuration at path (a file or a directory) and
// opens the store. It does not listen yet.
func NewServer(ctx context.Context, path string, o ServerOptions) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.GRPCListen == "" {
		o.GRPCListen = DefaultGRPCListen
	}
	if o.HTTPListen == "" {
		o.HTTPListen = DefaultHTTPListen
	}
	if o.AdminListen == "" {
		o.AdminListen = DefaultAdminListen
	}
	if o.Watch == 0 {
		o.Watch = DefaultWatch
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.MaxDescriptors < 0 || o.MaxEntries < 0 {
		return nil, fmt.Errorf("max descriptors %d, max entries %d: neither may be negative", o.MaxDescriptors, o.MaxEntries)
	}
	w := watch.New(path)
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	rules, err := Compile(c)
	if err != nil {
		return nil, err
	}
	s := &Server{path: path, o: o, logger: o.Logger, reg: metrics.NewRegistry(), watcher: w}
	s.metrics = metrics.New(s.reg)
	store, closer, err := storeconfig.Open(ctx, o.Store, o.Logger)
	if err != nil {
		return nil, err
	}
	s.store = closer
	s.metrics.CollectStoreFallback(store)
	sm, err := NewMetrics(s.reg, s.metrics.Decisions())
	if err != nil {
		closer.Close()
		return nil, err
	}
	s.svc = NewService(s.metrics.InstrumentStore(store), rules,
		WithAllOrNothing(o.AllOrNothing),
		WithResponseHeaders(o.ResponseHeaders),
		WithMaxDescriptors(o.MaxDescriptors),
		WithMaxEntries(o.MaxEntries),
		WithLogger(o.Logger),
		WithMetrics(sm))
	s.metrics.Loaded(rules.Len())
	return s, nil
}

// Service is the server's Service.
func (s *Server) Service() *Service { return s.svc }

// GRPCAddr is the gRPC listener's address once Run listens, else nil.
func (s *Server) GRPCAddr() net.Addr { return load(&s.grpcAddr) }

// HTTPAddr is the HTTP listener's address once Run listens, else nil.
func (s *Server) HTTPAddr() net.Addr { return load(&s.httpAddr) }

// AdminAddr is the admin listener's address once Run listens, else nil.
func (s *Server) AdminAddr() net.Addr { return load(&s.adm) }

func load(p *atomic.Pointer[net.Addr]) net.Addr {
	if a := p.Load(); a != nil {
		return *a
	}
	return nil
}

// Run listens and serves until ctx is done, then stops gracefully: the
// health service turns NOT_SERVING, calls in flight finish (up to the
// shutdown timeout), and the store closes.
func (s *Server) Run(ctx context.Context) error {
	defer s.store.Close()
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	listen := func(addr string, to *atomic.Pointer[net.Addr], what string) (net.Listener, error) {
		if addr == "-" {
			return nil, nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("%s listen: %w", what, err)
		}
		a := ln.Addr()
		to.Store(&a)
		lns = append(lns, ln)
		return ln, nil
	}
	gln, err := listen(s.o.GRPCListen, &s.grpcAddr, "grpc")
	if err != nil {
		return err
	}
	hln, err := listen(s.o.HTTPListen, &s.httpAddr, "http")
	if err != nil {
		return err
	}
	aln, err := listen(s.o.AdminListen, &s.adm, "admin")
	if err != nil {
		return err
	}

	gs := grpc.NewServer(
		// Calls run on long-lived workers rather than a new goroutine each,
		// whose stack would grow (runtime.morestack) on every call: 8% of
		// the service's CPU under load before this.
		grpc.NumStreamWorkers(streamWorkers),
		// Rate limit requests and responses encoded by hand, the rest by
		// gRPC's proto codec: see codec.
		grpc.ForceServerCodecV2(newCodec()),
	)
	rlsv3.RegisterRateLimitServiceServer(gs, s.svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	errc := make(chan error, 3)
	go func() { errc <- gs.Serve(gln) }()
	var servers []*http.Server
	serveHTTP := func(ln net.Listener, h http.Handler) {
		if ln == nil {
			return
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
			ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug)}
		servers = append(servers, srv)
		go func() {
			err := srv.Serve(ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}()
	}
	serveHTTP(hln, s.svc.HTTPHandler())
	serveHTTP(aln, metrics.AdminHandler(s.reg, s.readyErr))
	s.ready.Store(true)
	str := func(a net.Addr) string {
		if a == nil {
			return "off"
		}
		return a.String()
	}
	s.logger.Info("rate limit service listening", "grpc", str(s.GRPCAddr()), "http", str(s.HTTPAddr()), "admin", str(s.AdminAddr()),
		"config", s.path, "domains", s.svc.Rules().Domains(), "store", s.o.Store.String(), "all_or_nothing", s.o.AllOrNothing)

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go s.watcher.Run(wctx, s.o.Watch, func() {
		s.logger.Info("config changed", "config", s.path)
		_ = s.Reload()
	})

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	s.ready.Store(false)
	hs.Shutdown()
	s.logger.Info("shutting down: finishing calls in flight", "timeout", s.o.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.ShutdownTimeout)
	defer cancel()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	for _, srv := range servers {
		_ = srv.Shutdown(sctx)
	}
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
	}
	if serveErr != nil {
		return serveErr
	}
	s.logger.Info("rate limit service stopped")
	return nil
}

func (s *Server) readyErr() error {
	if !s.ready.Load() {
		return errors.New("not serving")
	}
	return nil
}

// Reload re-reads the configuration and, if it is valid, serves it from
// the next request on. An invalid configuration changes nothing: the error
// is logged, counted and returned, and the previous rules keep serving.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watcher.Loaded() // a bad configuration is not retried until it changes again
	c, err := Load(s.path)
	if err == nil {
		var rules *Rules
		if rules, err = Compile(c); err == nil {
			s.svc.SetRules(rules)
			s.metrics.Reload(true, rules.Len())
			s.logger.Info("config reloaded", "config", s.path, "domains", rules.Domains(), "limits", rules.Len())
			return nil
		}
	}
	s.metrics.Reload(false, 0)
	s.logger.Error("config reload failed; the previous rules keep serving", "config", s.path, "err", err)
	return err
}
