package rls

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server"
	"github.com/ratekeeper/ratekeeper/internal/server/adminauth"
	"github.com/ratekeeper/ratekeeper/internal/server/buildinfo"
	"github.com/ratekeeper/ratekeeper/internal/server/serverstore"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing"
	"github.com/ratekeeper/ratekeeper/internal/topfleet"
	"github.com/ratekeeper/ratekeeper/internal/topk"
	"github.com/ratekeeper/ratekeeper/storeconfig"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// Defaults of ServerOptions.
const (
	DefaultGRPCListen      = "127.0.0.1:8081"
	DefaultHTTPListen      = "127.0.0.1:8080"
	DefaultAdminListen     = "127.0.0.1:9090"
	DefaultWatch           = server.DefaultWatch
	DefaultShutdownTimeout = server.DefaultShutdownTimeout
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
	// GRPCTLS and HTTPTLS, when Enabled, make the gRPC and HTTP listeners
	// speak TLS only, with certificates that follow their files: a
	// renewal is served from the next handshake. A ClientCAFile refuses
	// clients without a certificate that chains to it (mutual TLS). The
	// HTTP listener offers HTTP/2 and HTTP/1.1 (ALPN). The zero value is
	// clear text. The admin listener is always clear text.
	GRPCTLS, HTTPTLS tlsconfig.Server
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
	// AdminToken, when not empty, turns on POST /v1/reset on the HTTP
	// listener for requests with "Authorization: Bearer <AdminToken>"
	// (ratekeeper serve reads it from --admin-token-file). Empty: the
	// endpoint answers 404. It also guards the admin listener's GET
	// /v1/top, whose keys name clients.
	AdminToken string
	// ProtectReads asks for AdminToken on GET /v1/config and GET
	// /v1/status too.
	ProtectReads bool
}

// Server runs a Service on its gRPC, HTTP and admin listeners and reloads
// its configuration. Create it with NewServer, run it with Run.
type Server struct {
	path string
	o    ServerOptions
	proc *server.Process
	svc  *Service
	top  *topk.Board // the limited clients /v1/top lists
	// fleet shares top with the serve processes on the same Redis (nil
	// on the memory store).
	fleet *topfleet.Fleet
	tr    *tracing.Tracing // nil unless OTEL_TRACES_EXPORTER asks for traces

	grpcAddr, httpAddr, adminAddr server.Addr
	grpcTLS, httpTLS              *tls.Config // nil: clear text
}

// NewServer loads the configuration at path (a file or a directory) and
// opens the store. It does not listen yet.
func NewServer(ctx context.Context, path string, o ServerOptions) (*Server, error) {
	if o.GRPCListen == "" {
		o.GRPCListen = DefaultGRPCListen
	}
	if o.HTTPListen == "" {
		o.HTTPListen = DefaultHTTPListen
	}
	if o.AdminListen == "" {
		o.AdminListen = DefaultAdminListen
	}
	if o.MaxDescriptors < 0 || o.MaxEntries < 0 {
		return nil, fmt.Errorf("max descriptors %d, max entries %d: neither may be negative", o.MaxDescriptors, o.MaxEntries)
	}
	proc := server.New(path, o.Logger)
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	logWarnings(proc.Logger, c)
	rules, err := Compile(c)
	if err != nil {
		return nil, err
	}
	s := &Server{path: path, o: o, proc: proc}
	if s.grpcTLS, err = listenerTLS("grpc", o.GRPCTLS, proc.Logger, "h2"); err != nil {
		return nil, err
	}
	if o.HTTPListen == "-" && o.HTTPTLS.Enabled() {
		return nil, fmt.Errorf("http tls: is set, but the HTTP listener is off")
	}
	if s.httpTLS, err = listenerTLS("http", o.HTTPTLS, proc.Logger, "h2", "http/1.1"); err != nil {
		return nil, err
	}
	if err := s.startTracing(ctx); err != nil {
		return nil, err
	}
	store, err := proc.OpenStore(ctx, serverstore.Opener(o.Store))
	if err != nil {
		return nil, err
	}
	sm, err := NewMetrics(proc.Registry, proc.Metrics.Decisions())
	if err != nil {
		proc.Close()
		return nil, err
	}
	s.top = newBoard()
	if client, ok := storeconfig.RedisClient(proc.Store()); ok {
		s.fleet = topfleet.New(client, s.top, topfleet.WithPrefix(fleetPrefix),
			topfleet.WithLogger(proc.Logger), topfleet.WithErrors(proc.Metrics.FleetError))
	}
	s.svc = NewService(store, rules,
		WithAllOrNothing(o.AllOrNothing),
		WithResponseHeaders(o.ResponseHeaders),
		WithMaxDescriptors(o.MaxDescriptors),
		WithMaxEntries(o.MaxEntries),
		WithLogger(proc.Logger),
		WithMetrics(sm),
		withTop(s.top),
		withTracing(s.tr, storeMode(o.Store)))
	proc.Loaded(rules.Len())
	return s, nil
}

// startTracing turns tracing on when the environment asks for it, with a
// client span per store call on Redis.
func (s *Server) startTracing(ctx context.Context) error {
	var err error
	if s.tr, err = tracing.FromEnv(ctx, "ratekeeper-serve", buildinfo.Read().Version); err != nil {
		return err
	}
	if s.tr != nil && !s.o.Store.IsMemory() {
		s.proc.Metrics.TraceStore(func(ctx context.Context, call string) (context.Context, func(error)) {
			return s.tr.Call(ctx, "redis "+call, "redis")
		})
	}
	return nil
}

// listenerTLS builds the TLS config of the listener what names, offering
// protos by ALPN, or returns nil for clear text.
func listenerTLS(what string, ts tlsconfig.Server, logger *slog.Logger, protos ...string) (*tls.Config, error) {
	if !ts.Enabled() {
		return nil, nil
	}
	c, err := ts.Config(tlsconfig.Options{Logger: logger.With("listener", what), NextProtos: protos})
	if err != nil {
		return nil, fmt.Errorf("%s tls: %w", what, err)
	}
	return c, nil
}

// tlsMode says how a listener speaks: "off" (clear text), "on" (TLS) or
// "mutual" (TLS, and clients show a certificate).
func tlsMode(ts tlsconfig.Server) string {
	switch {
	case !ts.Enabled():
		return "off"
	case ts.ClientCAFile != "":
		return "mutual"
	}
	return "on"
}

// Service is the server's Service.
func (s *Server) Service() *Service { return s.svc }

// GRPCAddr is the gRPC listener's address once Run listens, else nil.
func (s *Server) GRPCAddr() net.Addr { return s.grpcAddr.Get() }

// HTTPAddr is the HTTP listener's address once Run listens, else nil.
func (s *Server) HTTPAddr() net.Addr { return s.httpAddr.Get() }

// AdminAddr is the admin listener's address once Run listens, else nil.
func (s *Server) AdminAddr() net.Addr { return s.adminAddr.Get() }

// Run listens and serves until ctx is done, then stops gracefully: the
// health service turns NOT_SERVING, calls in flight finish (up to the
// shutdown timeout), and the store closes.
func (s *Server) Run(ctx context.Context) error {
	gln, hln, aln, err := s.listen()
	if err != nil {
		s.proc.Close()
		return err
	}
	defer s.tr.Close(ctx) // sends the spans not yet sent
	defer s.fleet.Start(ctx)()
	servers := []server.Server{s.newGRPCServer(gln)}
	if hln != nil {
		servers = append(servers, s.newHTTPServer(hln))
	}
	s.proc.Logger.Info("rate limit service listening", "grpc", s.grpcAddr.String(), "http", s.httpAddr.String(), "admin", s.adminAddr.String(),
		"grpc_tls", tlsMode(s.o.GRPCTLS), "http_tls", tlsMode(s.o.HTTPTLS), "admin_tls", "off",
		"config", s.path, "domains", s.svc.Rules().Domains(), "store", s.o.Store.String(), "all_or_nothing", s.o.AllOrNothing)
	return s.proc.Run(ctx, server.Run{
		Name:            "rate limit service",
		Servers:         servers,
		Admin:           aln,
		AdminRoutes:     s.adminRoutes(),
		Watch:           s.o.Watch,
		Reload:          s.Reload,
		ShutdownTimeout: s.o.ShutdownTimeout,
	})
}

// listen opens the gRPC, HTTP and admin listeners; an address of "-" gives
// a nil listener. On an error it closes those it opened.
func (s *Server) listen() (gln, hln, aln net.Listener, err error) {
	var lns []net.Listener
	open := func(addr, what string, to *server.Addr) net.Listener {
		if addr == "-" || err != nil {
			return nil
		}
		var ln net.Listener
		if ln, err = server.Listen(addr, what); err != nil {
			return nil
		}
		to.Set(ln.Addr())
		lns = append(lns, ln)
		return ln
	}
	gln = open(s.o.GRPCListen, "grpc", &s.grpcAddr)
	hln = open(s.o.HTTPListen, "http", &s.httpAddr)
	aln = open(s.o.AdminListen, "admin", &s.adminAddr)
	if err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, nil, nil, err
	}
	return gln, hln, aln, nil
}

// newGRPCServer is the gRPC server on ln: the rate limit service, health
// (SERVING) and reflection.
func (s *Server) newGRPCServer(ln net.Listener) grpcServer {
	gopts := []grpc.ServerOption{
		// Calls run on long-lived workers rather than a new goroutine each,
		// whose stack would grow (runtime.morestack) on every call: 8% of
		// the service's CPU under load before this.
		grpc.NumStreamWorkers(streamWorkers),
		// Rate limit requests and responses encoded by hand, the rest by
		// gRPC's proto codec: see codec.
		grpc.ForceServerCodecV2(newCodec()),
	}
	if s.grpcTLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(s.grpcTLS)))
	}
	if s.tr != nil {
		gopts = append(gopts, grpc.UnaryInterceptor(traceCalls(s.tr)))
	}
	gs := grpc.NewServer(gopts...)
	rlsv3.RegisterRateLimitServiceServer(gs, s.svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return grpcServer{gs, hs, ln}
}

// newHTTPServer is the HTTP JSON API's server on ln, over TLS when
// HTTPTLS is enabled.
func (s *Server) newHTTPServer(ln net.Listener) server.Server {
	if s.httpTLS != nil {
		// net/http serves HTTP/2 on a TLS connection that chose h2.
		ln = tls.NewListener(ln, s.httpTLS)
	}
	return server.HTTP(&http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: slog.NewLogLogger(s.proc.Logger.Handler(), slog.LevelDebug)}, ln)
}

// grpcServer serves gRPC as a server.Server: its shutdown turns the health
// service NOT_SERVING, lets calls in flight finish until the deadline, and
// then cuts the rest.
type grpcServer struct {
	gs *grpc.Server
	hs *health.Server
	ln net.Listener
}

func (g grpcServer) Serve() error { return g.gs.Serve(g.ln) }

func (g grpcServer) Shutdown(ctx context.Context) error {
	g.hs.Shutdown()
	stopped := make(chan struct{})
	go func() { g.gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		g.gs.Stop()
		<-stopped
		return ctx.Err()
	}
}

// logWarnings logs what c says that can never apply (Config.Warnings).
func logWarnings(logger *slog.Logger, c *Config) {
	for _, w := range c.Warnings() {
		logger.Warn("config: this can never apply", "warning", w.Error())
	}
}

// Reload re-reads the configuration and, if it is valid, serves it from
// the next request on. An invalid configuration changes nothing: the error
// is logged, counted and returned, and the previous rules keep serving.
func (s *Server) Reload() error {
	return s.proc.Reload(func() (int, []any, error) {
		c, err := Load(s.path)
		if err != nil {
			return 0, nil, err
		}
		rules, err := Compile(c)
		if err != nil {
			return 0, nil, err
		}
		logWarnings(s.proc.Logger, c)
		s.svc.SetRules(rules)
		return rules.Len(), []any{"domains", rules.Domains(), "limits", rules.Len()}, nil
	})
}

// httpHandler is the Service's JSON API with the server's own endpoints
// beside it: GET /v1/config (the limits loaded, the file, the store with
// its password redacted) and POST /v1/reset (off without an admin token).
func (s *Server) httpHandler() http.Handler {
	guard := adminauth.New(s.proc.Logger, s.proc.Metrics.AdminUnauthorized)
	mux := http.NewServeMux()
	api := s.svc.HTTPHandler()
	if s.tr != nil {
		api = traceRequests(s.tr, api)
	}
	mux.Handle("/", api)
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, r *http.Request) {
		if s.o.ProtectReads && !guard.Authorize(w, r, s.o.AdminToken) {
			return
		}
		rules := s.svc.Rules()
		writeJSON(w, ConfigResponse{Path: s.path, Store: s.o.Store.Redacted(), StoreMode: s.o.Store.Mode,
			ResetEnabled: s.o.AdminToken != "", Domains: rules.Domains(), Limits: rules.Limits()})
	})
	mux.HandleFunc("POST /v1/reset", func(w http.ResponseWriter, r *http.Request) {
		if s.o.AdminToken == "" {
			httpError(w, http.StatusNotFound, errors.New("reset is off: start ratekeeper serve with --admin-token-file (or RATEKEEPER_ADMIN_TOKEN_FILE)"))
			return
		}
		if !guard.Authorize(w, r, s.o.AdminToken) {
			return
		}
		req, err := readCheck(w, r)
		if err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		done, err := s.svc.Reset(r.Context(), s.proc.Store(), req)
		switch {
		case errors.Is(err, ratekeeper.ErrNoReset):
			httpError(w, http.StatusNotImplemented, err)
			return
		case err != nil:
			decideError(w, err)
			return
		}
		s.proc.Logger.Info("admin reset counters", "domain", req.GetDomain(), "descriptors", len(done), "remote", r.RemoteAddr)
		writeJSON(w, ResetResponse{Reset: done})
	})
	return mux
}

// ConfigResponse is the answer of GET /v1/config.
type ConfigResponse struct {
	// Path is the configuration file or directory.
	Path string `json:"path"`
	// Store is the store's URL with its password redacted, and its mode.
	Store        string   `json:"store"`
	StoreMode    string   `json:"store_mode,omitempty"`
	ResetEnabled bool     `json:"reset_enabled"`
	Domains      []string `json:"domains"`
	Limits       []Limit  `json:"limits"`
}

// ResetResponse is the answer of POST /v1/reset: for each descriptor of
// the request, in order, whether a counter was reset (false for one
// without a limit).
type ResetResponse struct {
	Reset []bool `json:"reset"`
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}
