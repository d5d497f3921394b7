package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/fastpath"
	"github.com/ratekeeper/ratekeeper/gateway/internal/h2"
	"github.com/ratekeeper/ratekeeper/gateway/internal/problem"
	"github.com/ratekeeper/ratekeeper/gateway/internal/upstream"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/internal/server"
	"github.com/ratekeeper/ratekeeper/internal/server/buildinfo"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/internal/server/serverstore"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing"
	"github.com/ratekeeper/ratekeeper/internal/topfleet"
	"github.com/ratekeeper/ratekeeper/internal/topk"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storeconfig"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// Defaults for fields a config leaves empty.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultShutdownTimeout = server.DefaultShutdownTimeout
	DefaultWatch           = server.DefaultWatch
	// Demo is the upstream that serves the built-in demo API.
	Demo = "builtin:demo"
)

// Gateway is a running configuration of the proxy. Create it with New, run
// it with Run, and call Reload to re-read the file.
type Gateway struct {
	path    string
	proc    *server.Process
	logger  *slog.Logger
	metrics *metrics.Metrics
	mw      *httplimit.Middleware
	handler http.Handler
	// upstreamProxy is the proxy to the upstream (nil for the demo API).
	upstreamProxy *httputil.ReverseProxy
	// direct is the direct transport to the upstream, and target its URL
	// (nil when requests take http.Transport).
	direct *upstream.Transport
	target *url.URL
	// reroutes are the proxies to the upstreams over_limit reroutes to.
	reroutes reroutes
	// settings bound clients and the upstream; read at start.
	settings settings
	headers  atomic.Pointer[ruleHeaders] // the headers the rules read

	// top counts each rule's refused and near-limit keys (GET /v1/top).
	top *topk.Board
	// access is the access log in the mode the file last asked for (nil
	// when off); accessLogger writes the lines of every mode.
	access       atomic.Pointer[accessLog]
	accessLogger *slog.Logger
	// fleet shares top with the gateways on the same Redis (nil on the
	// memory store).
	fleet *topfleet.Fleet
	// tracing is nil unless OTEL_TRACES_EXPORTER asks for traces.
	tracing *tracing.Tracing

	cfg  atomic.Pointer[Config] // the config being served
	file startFields            // the file's start-only fields as last read; reloads only

	addr, adminAddr server.Addr

	// Set by tests before Run: onPanic is given a panic the fast path
	// recovered, onHandOff is told of each hand-off to net/http.
	onPanic   func(any)
	onHandOff func()
}

// Options adjust a Gateway beyond its file; zero values keep the file's.
type Options struct {
	// Logger receives the gateway's logs; nil discards them.
	Logger *slog.Logger
	// Listen and AdminListen override the file's addresses.
	Listen, AdminListen string
	// Upstream overrides the file's upstream.
	Upstream string
	// ClientTransport overrides the file's client_transport (fast or
	// standard).
	ClientTransport string
	// Store's non-zero fields override the file's store section.
	Store storeconfig.Config
	// StoreNotRequired turns off the file's store.require, which
	// Store.Require can only turn on (--store-require=false).
	StoreNotRequired bool
	// AccessLog receives the access log's lines when the file turns it on
	// (access_log); nil is standard output.
	AccessLog io.Writer
}

// New loads the config file at path and builds the gateway: the store, the
// middleware and the proxy. It does not listen yet.
func New(ctx context.Context, path string, o Options) (*Gateway, error) {
	proc := server.New(path, o.Logger)
	cfg, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	file := startOnly(cfg)
	o.Apply(cfg)
	set, err := rules.Compile(&cfg.Config)
	if err != nil {
		return nil, err
	}
	if cfg.Upstream == "" {
		return nil, &rules.Error{File: path, Field: "upstream", Err: errors.New("is missing: the URL of the API to protect, or builtin:demo")}
	}
	g := &Gateway{path: path, proc: proc, logger: proc.Logger, metrics: proc.Metrics, file: file, settings: settingsOf(cfg), top: topk.NewBoard(topKeys)}
	g.cfg.Store(cfg)
	if g.tracing, err = tracing.FromEnv(ctx, "ratekeeper-proxy", buildinfo.Read().Version); err != nil {
		proc.Close()
		return nil, err
	}
	if g.tracing != nil && !cfg.Store.IsMemory() {
		proc.Metrics.TraceStore(func(ctx context.Context, call string) (context.Context, func(error)) {
			return g.tracing.Call(ctx, "redis "+call, "redis")
		})
	}
	store, err := proc.OpenStore(ctx, serverstore.Opener(cfg.Store))
	if err != nil {
		return nil, err
	}
	if err := storeconfig.SetLimitModes(proc.Store(), set.StoreModes()); err != nil {
		proc.Close()
		return nil, err
	}
	if client, ok := storeconfig.RedisClient(proc.Store()); ok {
		g.fleet = topfleet.New(client, g.top, topfleet.WithLogger(g.logger), topfleet.WithErrors(g.metrics.FleetError))
	}
	g.accessLogger = slog.New(slog.NewJSONHandler(cmp.Or[io.Writer](o.AccessLog, os.Stdout), nil))
	g.access.Store(newAccessLog(cfg.AccessLog, g.accessLogger))
	mwOpts := []httplimit.Option{httplimit.WithLogger(g.logger), httplimit.WithMetrics(g.metrics), httplimit.WithDecided(g.decided), httplimit.WithBodyTimeout(g.settings.bodyTimeout)}
	if g.tracing != nil {
		mwOpts = append(mwOpts, httplimit.WithTrace(g.traceDecision))
	}
	g.mw, err = httplimit.New(store, set, mwOpts...)
	if err != nil {
		proc.Close()
		return nil, err
	}
	up, err := g.upstream(cfg.Upstream, cfg.UpstreamTransport != "standard")
	if err == nil {
		err = g.loadReroutes(set.Reroutes())
	}
	if err != nil {
		proc.Close()
		return nil, err
	}
	g.handler = g.view(g.mw.Handler(g.buffer(up)))
	if g.tracing != nil {
		g.handler = g.traced(g.handler)
	}
	g.handler = g.logged(g.handler)
	proc.Loaded(len(set.Rules))
	return g, nil
}

// Apply sets the fields of c, a file LoadFile read, that o overrides, as
// New does: o's non-zero fields (the command's flags and environment) win
// over the file's. The store's relative paths, the file's and o's, are
// made relative to the file's directory and the working directory.
func (o Options) Apply(c *Config) {
	if o.Listen != "" {
		c.Listen = o.Listen
	}
	if o.AdminListen != "" {
		c.AdminListen = o.AdminListen
	}
	if o.Upstream != "" {
		c.Upstream = o.Upstream
	}
	if o.ClientTransport != "" {
		c.ClientTransport = o.ClientTransport
	}
	if o.Store.URL != "" {
		c.Store.URL = o.Store.URL
	}
	if o.Store.Timeout != 0 {
		c.Store.Timeout = o.Store.Timeout
	}
	if o.Store.OnError != "" {
		c.Store.OnError = o.Store.OnError
	}
	if o.Store.Instances != 0 {
		c.Store.Instances = o.Store.Instances
	}
	if o.Store.Mode != "" {
		c.Store.Mode = o.Store.Mode
	}
	if o.Store.SyncPeriod != 0 {
		c.Store.SyncPeriod = o.Store.SyncPeriod
	}
	if o.Store.MaxKeys != 0 {
		c.Store.MaxKeys = o.Store.MaxKeys
	}
	if o.Store.Password != "" {
		c.Store.Password = o.Store.Password
	}
	if o.Store.Require {
		c.Store.Require = true
	}
	if o.StoreNotRequired {
		c.Store.Require = false
	}
	// The file's store paths are the file's directory's; the flags' were
	// made absolute by the command.
	c.Store = c.Store.Resolve(c.dir)
	for _, f := range []struct {
		dst *string
		src string
	}{
		{&c.Store.TLS.CAFile, o.Store.TLS.CAFile},
		{&c.Store.TLS.CertFile, o.Store.TLS.CertFile},
		{&c.Store.TLS.KeyFile, o.Store.TLS.KeyFile},
		{&c.Store.TLS.ServerName, o.Store.TLS.ServerName},
		{&c.Store.PasswordFile, o.Store.PasswordFile},
	} {
		if f.src != "" {
			*f.dst = f.src
		}
	}
	if o.Store.TLS.InsecureSkipVerify {
		c.Store.TLS.InsecureSkipVerify = true
	}
	if o.Store.Password != "" && o.Store.PasswordFile == "" {
		c.Store.PasswordFile = "" // the file's, overridden
	}
}

// Handler is the gateway's request path: the limits, then the upstream.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Addr is the address the gateway listens on, once Run has started.
func (g *Gateway) Addr() net.Addr { return g.addr.Get() }

// AdminAddr is the admin listener's address, once Run has started (nil
// without one).
func (g *Gateway) AdminAddr() net.Addr { return g.adminAddr.Get() }

// upstream builds the proxy to the upstream, or the demo API. A request
// that an over_limit reroutes goes to that rule's upstream instead.
func (g *Gateway) upstream(s string, direct bool) (http.Handler, error) {
	var main http.Handler = DemoHandler()
	if s != Demo {
		rp, err := g.proxyTo(s, direct)
		if err != nil {
			return nil, err
		}
		g.upstreamProxy = rp
		main = rp
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := main
		if u, ok := httplimit.Reroute(r); ok {
			p, err := g.rerouteProxy(u)
			if err != nil { // cannot happen: the URL was valid when loaded
				problem.BadGateway(w, redactedURL(u), err)
				return
			}
			h = p
		} else if g.upstreamProxy == nil {
			h.ServeHTTP(w, r) // the demo API writes no 1xx
			return
		}
		if hd := w.Header(); len(hd) > 0 {
			w = &keepAfter1xx{ResponseWriter: w, saved: maps.Clone(hd)}
		}
		h.ServeHTTP(w, r)
	}), nil
}

// keepAfter1xx keeps the headers set before the proxy ran (the rate limit
// headers) on the final response. ReverseProxy passes an upstream's 1xx
// (103 Early Hints) on by copying its headers into the writer's map,
// writing it and clearing the map, which would take the rate limit headers
// with it. They are left out of the 1xx and put back before the final
// status, ahead of the upstream's own.
type keepAfter1xx struct {
	http.ResponseWriter
	saved   http.Header
	cleared bool
}

func (w *keepAfter1xx) WriteHeader(code int) {
	h := w.ResponseWriter.Header()
	switch {
	case code >= 100 && code < 200 && code != http.StatusSwitchingProtocols:
		for k := range w.saved {
			delete(h, k)
		}
		w.cleared = true
	case w.cleared:
		for k, vs := range w.saved {
			h[k] = append(slices.Clip(vs), h[k]...)
		}
		w.cleared = false
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets ReverseProxy reach the connection's Flush and Hijack.
func (w *keepAfter1xx) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// proxyTo builds the reverse proxy to the upstream URL s.
func (g *Gateway) proxyTo(s string, direct bool) (*httputil.ReverseProxy, error) {
	target, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	tr, err := g.httpTransport(target)
	if err != nil {
		return nil, err
	}
	var rt http.RoundTripper = tr
	if dt := upstream.New(target, tr); dt != nil && direct && tr.Protocols.HTTP1() {
		rt = dt
		g.direct, g.target = dt, target
	}
	return &httputil.ReverseProxy{
		Rewrite:    g.rewriteTo(target),
		Transport:  rt,
		BufferPool: newBufferPool(),
		// A status outside 100-999 ("HTTP/1.1 000 OK", which Go's client
		// reads as 0) would make ReverseProxy's WriteHeader panic: net/http
		// recovers and drops the client's connection. It is a 502, as the
		// fast path answers it.
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode < 100 || resp.StatusCode > 999 {
				return fmt.Errorf("the upstream answered with status %d", resp.StatusCode)
			}
			return nil
		},
		ErrorHandler: g.proxyErrorHandler(target),
		ErrorLog:     slog.NewLogLogger(g.logger.Handler(), slog.LevelWarn),
	}, nil
}

// httpTransport is the http.Transport to target: the upstream timeouts,
// upstream_tls, and the protocols upstream_protocol names.
func (g *Gateway) httpTransport(target *url.URL) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 1024
	tr.IdleConnTimeout = g.settings.upstreamIdle
	tr.ResponseHeaderTimeout = g.settings.responseHeader
	tr.DialContext = (&net.Dialer{Timeout: g.settings.dial, KeepAlive: 30 * time.Second}).DialContext
	// A proxy passes bodies as they are: no Accept-Encoding of its own, no
	// transparent decompression.
	tr.DisableCompression = true
	cfg := g.cfg.Load()
	if target.Scheme == "https" && !cfg.UpstreamTLS.IsZero() {
		var err error
		if tr.TLSClientConfig, err = cfg.upstreamTLS().Config(tlsconfig.Options{Logger: g.logger}); err != nil {
			return nil, &rules.Error{File: g.path, Field: "upstream_tls", Err: err}
		}
	}
	var p http.Protocols
	switch {
	case cfg.UpstreamProtocol == ProtocolH2 && target.Scheme == "http":
		p.SetUnencryptedHTTP2(true) // prior knowledge
	case cfg.UpstreamProtocol == ProtocolH2:
		p.SetHTTP2(true)
	default: // auto and http1: HTTP/1.1, over the direct transport
		p.SetHTTP1(true)
	}
	tr.Protocols = &p
	return tr, nil
}

// rewriteTo is the proxy's Rewrite to target. It passes X-Forwarded-For
// on, with the peer appended, from a trusted proxy only. From anyone else
// it drops it, the other client address headers, and the tier and offset
// headers (rules.Set.ProxyHeaders).
func (g *Gateway) rewriteTo(target *url.URL) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		set := g.mw.Rules()
		if set.ClientIP().Trusts(pr.In) {
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		} else {
			for _, h := range clientIPHeaders {
				delete(pr.Out.Header, h) // X-Real-IP and its kin, as X-Forwarded-For
			}
			for _, h := range set.ProxyHeaders() {
				delete(pr.Out.Header, h) // a plan or offset the rules did not believe
			}
		}
		pr.SetURL(target)
		pr.SetXForwarded()
		g.tracing.Inject(pr.In.Context(), pr.Out.Header)
		if pr.Out.Method == http.MethodHead {
			// The connection ends with the answer: an upstream that
			// writes the body it declared anyway cannot answer
			// another request with it.
			pr.Out.Close = true
		}
	}
}

// proxyErrorHandler answers a request the proxy could not get an answer
// to: 408 when its body stalled, else 502; nothing when the client left.
// The answer costs a rule's default (httplimit.Unserved) when the
// upstream never got the request: a stalled body, or no connection. An
// upstream that got it may be working on it still (a response_header
// timeout), so then the request keeps its reserve.
func (g *Gateway) proxyErrorHandler(target *url.URL) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return // the client left: no one to answer
		}
		if bodyStalled(r) || notSent(err) {
			httplimit.Unserved(w)
		}
		if bodyStalled(r) {
			problem.Write(w, http.StatusRequestTimeout, "Request Timeout", "the request body did not arrive in time: "+err.Error())
			return
		}
		g.logger.WarnContext(r.Context(), "upstream unreachable", "upstream", target.Redacted(), "method", r.Method, "path", r.URL.Path, "err", err)
		problem.BadGateway(w, target.Redacted(), err)
	}
}

// notSent reports whether err says the request never reached the
// upstream: no connection to it could be made.
func notSent(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns)
}

// Run serves until ctx is done, then shuts down gracefully: it stops
// accepting, lets requests in flight finish (up to shutdown_timeout), and
// returns. It polls the file for changes meanwhile.
func (g *Gateway) Run(ctx context.Context) error {
	if g.upstreamProxy != nil {
		defer closeIdle(g.upstreamProxy)
	}
	defer g.closeReroutes()
	cfg := g.cfg.Load()
	ln, aln, err := g.listen(cfg)
	if err != nil {
		g.proc.Close()
		return err
	}
	defer g.tracing.Close(ctx) // sends the spans not yet sent
	defer g.fleet.Start(ctx)()
	g.logger.Info("gateway listening", "addr", g.addr.String(), "tls", cfg.TLS.Enabled(), "h2c", cfg.H2C, "admin", g.adminAddr.String(), "upstream", redactedURL(cfg.Upstream), "store", cfg.Store.String(), "rules", len(g.mw.Rules().Rules))
	return g.proc.Run(ctx, server.Run{
		Name:            "gateway",
		Servers:         g.servers(cfg, ln),
		Admin:           aln,
		AdminRoutes:     g.adminHandler(),
		Watch:           time.Duration(cfg.Watch),
		Reload:          g.Reload,
		ShutdownTimeout: time.Duration(cfg.ShutdownTimeout),
	})
}

// listen opens the gateway's listener, capped per client address and
// over TLS when cfg says so, and the admin listener (nil when none). It
// records their addresses. On an error it closes what it opened.
func (g *Gateway) listen(cfg *Config) (ln, aln net.Listener, err error) {
	listen := cmp.Or(cfg.Listen, DefaultListen)
	if ln, err = server.Listen(listen, "gateway"); err != nil {
		return nil, nil, err
	}
	g.addr.Set(ln.Addr())
	if cfg.AdminListen != "" {
		if aln, err = server.Listen(cfg.AdminListen, "admin"); err != nil {
			ln.Close()
			return nil, nil, err
		}
		g.adminAddr.Set(aln.Addr())
	}
	if n := g.settings.maxConnsPerIP; n > 0 {
		ln = newCapListener(ln, n, g.mw.Rules, g.metrics.ConnectionsRefused())
	}
	if !cfg.TLS.Enabled() {
		return ln, aln, nil
	}
	tc, err := cfg.serverTLS().Config(tlsconfig.Options{Logger: g.logger, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		ln.Close()
		if aln != nil {
			aln.Close()
		}
		return nil, nil, &rules.Error{File: g.path, Field: "tls", Err: err}
	}
	// Connections are counted against max_conns_per_ip before their
	// handshake, which is the costly part. The fast path reaches their
	// sockets under TLS (fastpath.Sockets).
	return tls.NewListener(fastpath.Sockets(ln), tc), aln, nil
}

// servers are what serve ln: the fast path in front of net/http when it
// can take the config, else net/http alone.
func (g *Gateway) servers(cfg *Config, ln net.Listener) []server.Server {
	srv := g.httpServer(cfg)
	var fast *fastpath.Server
	if cfg.ClientTransport != "standard" && g.direct != nil && g.tracing == nil {
		// nil when the upstream URL has what the fast path does not
		// forward (a query, an escaped path): net/http serves all then.
		fast = fastpath.New(g.mw, g.direct, g.target, g.settings.fastPath(), g.logger, g.addr.Get())
	}
	if fast == nil {
		return []server.Server{server.HTTP(srv, ln)}
	}
	fast.OnPanic, fast.OnHandOff = g.onPanic, g.onHandOff
	// The fast path does not log: while the access log is on, net/http
	// serves each connection from its next request.
	fast.HandOffAll = func() bool { return g.access.Load() != nil }
	fast.Accepted = g.metrics.ConnectionCounter("fast")
	// Connections the fast path hands off are served by srv.
	servers := []server.Server{fastServer{fast, ln}, server.HTTP(srv, fast.HandOff())}
	if h2s := g.h2Server(cfg); h2s != nil {
		h2s.HTTPServer = srv
		fast.H2, fast.H2C = h2s, cfg.H2C
		servers = append(servers, h2Server{h2s, make(chan struct{})})
	}
	return servers
}

// h2Server is the gateway's own HTTP/2 server when client_h2 asks for it
// (nil otherwise): the fast path hands it its HTTP/2 connections.
func (g *Gateway) h2Server(cfg *Config) *h2.Server {
	if cfg.ClientH2 != "frames" {
		return nil
	}
	s := h2.New(g.mw, g.direct, g.target, g.settings.h2(), g.logger, g.handler)
	if s == nil {
		return nil
	}
	s.OnPanic = g.onPanic
	// It does not log: while the access log is on, the handler serves
	// each stream.
	s.HandOffAll = func() bool { return g.access.Load() != nil }
	return s
}

// h2Server runs the HTTP/2 server as a server.Server: it serves what the
// fast path hands it until Shutdown.
type h2Server struct {
	s    *h2.Server
	done chan struct{}
}

func (s h2Server) Serve() error {
	<-s.done
	return nil
}

func (s h2Server) Shutdown(ctx context.Context) error {
	defer close(s.done)
	return s.s.Shutdown(ctx)
}

// httpServer is the net/http server of the gateway's listener: HTTP/1.1,
// HTTP/2 over TLS, and h2c when cfg turns it on.
func (g *Gateway) httpServer(cfg *Config) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true) // over TLS, by ALPN
	protocols.SetUnencryptedHTTP2(cfg.H2C)
	srv := &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: g.settings.readHeader,
		IdleTimeout:       g.settings.idle,
		Protocols:         &protocols,
		// A connection the fast path began over TLS reaches net/http
		// without its *tls.Conn showing: tell the request its state.
		ConnContext: withTLSState,
		ErrorLog:    slog.NewLogLogger(g.logger.Handler(), slog.LevelDebug),
	}
	if c := g.metrics.ConnectionCounter("net_http"); c != nil {
		srv.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				c.Inc()
			}
		}
	}
	return srv
}

// withTLSState keeps the TLS state of a connection that is not a
// *tls.Conn itself but wraps one (the fast path's hand-off), for the
// request view to set as the request's TLS.
func withTLSState(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*tls.Conn); ok {
		return ctx // net/http sets r.TLS itself
	}
	for range 4 { // the wrappers are few: the hand-off's over TLS's
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return ctx
		}
		c = u.NetConn()
		if tc, ok := c.(*tls.Conn); ok {
			st := tc.ConnectionState()
			return context.WithValue(ctx, tlsStateKey{}, &st)
		}
	}
	return ctx
}

type tlsStateKey struct{}

// fastServer runs the fast path on ln as a server.Server.
type fastServer struct {
	f  *fastpath.Server
	ln net.Listener
}

func (s fastServer) Serve() error { return s.f.Serve(s.ln) }

func (s fastServer) Shutdown(ctx context.Context) error {
	s.ln.Close()
	return s.f.Shutdown(ctx)
}

// Reload re-reads the config file and, if it is valid, serves its rules
// from the next request on. An invalid file changes nothing: the error is
// logged, counted and returned. Listen addresses, the upstream and the store
// are read at start only; a change to them is logged as needing a restart.
func (g *Gateway) Reload() error { return g.proc.Reload(g.reload) }

func (g *Gateway) reload() (int, []any, error) {
	if b, err := os.ReadFile(g.path); err == nil && len(bytes.TrimSpace(b)) == 0 {
		// Truncated by an editor or `>`: rather an error than no rules.
		return 0, nil, &rules.Error{File: g.path, Err: errors.New("is empty; write rules: [] to remove every rule")}
	}
	cfg, err := LoadFile(g.path)
	if err != nil {
		return 0, nil, err
	}
	set, err := rules.Compile(&cfg.Config)
	if err != nil {
		return 0, nil, err
	}
	old, was, now := g.cfg.Load(), g.file, startOnly(cfg)
	for _, f := range []struct{ name, was, now string }{
		{"listen", was.listen, now.listen},
		{"admin_listen", was.admin, now.admin},
		{"upstream", was.upstream, now.upstream},
		{"upstream_transport", was.transport, now.transport},
		{"client_transport or client_h2", was.client, now.client},
		{"store", was.store, now.store},
		{"paths, client or upstream_timeouts", was.bounds, now.bounds},
		{"rules' store_mode", was.modes, now.modes},
		{"tls, h2c, upstream_protocol or upstream_tls (certificates follow their files)", was.edge, now.edge},
	} {
		if f.was != f.now {
			g.logger.Warn("config change needs a restart to take effect; keeping the old value", "field", f.name, "old", f.was, "new", f.now)
		}
	}
	g.file = now
	cfg.Listen, cfg.AdminListen, cfg.Upstream, cfg.UpstreamTransport, cfg.ClientTransport, cfg.Store = old.Listen, old.AdminListen, old.Upstream, old.UpstreamTransport, old.ClientTransport, old.Store
	cfg.ClientH2 = old.ClientH2
	cfg.Paths, cfg.Client, cfg.UpstreamTimeouts = old.Paths, old.Client, old.UpstreamTimeouts
	cfg.TLS, cfg.H2C, cfg.UpstreamProtocol, cfg.UpstreamTLS = old.TLS, old.H2C, old.UpstreamProtocol, old.UpstreamTLS
	if err := g.loadReroutes(set.Reroutes()); err != nil {
		return 0, nil, err
	}
	g.mw.SetRules(set)
	g.access.Store(newAccessLog(cfg.AccessLog, g.accessLogger))
	g.cfg.Store(cfg)
	keep := map[string]bool{}
	for _, rl := range set.Rules {
		keep[rl.Name] = true
	}
	g.top.Forget(keep)
	return len(set.Rules), []any{"rules", len(set.Rules)}, nil
}

// bufferPool lends the proxy its copy buffers, which it would otherwise
// allocate (32 KiB) per request.
type bufferPool struct{ p *sync.Pool }

func newBufferPool() bufferPool {
	return bufferPool{&sync.Pool{New: func() any { return new([32 << 10]byte) }}}
}

func (b bufferPool) Get() []byte    { return b.p.Get().(*[32 << 10]byte)[:] }
func (b bufferPool) Put(buf []byte) { b.p.Put((*[32 << 10]byte)(buf[:32<<10])) }

// redactedURL is s with a password in it hidden, for logs: an upstream URL
// may carry credentials the gateway does not use, but must not log.
func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

// startFields are the fields read at start only.
type startFields struct{ listen, admin, upstream, transport, client, store, bounds, modes, edge string }

func startOnly(c *Config) startFields {
	var modes []string
	for _, r := range c.Rules {
		if r.StoreMode != "" {
			modes = append(modes, r.Name+"="+r.StoreMode)
		}
	}
	return startFields{c.Listen, c.AdminListen, redactedURL(c.Upstream), c.UpstreamTransport, c.ClientTransport + " " + c.ClientH2, c.Store.String(),
		fmt.Sprintf("%+v %+v %+v", c.Paths, c.Client, c.UpstreamTimeouts), strings.Join(modes, " "),
		fmt.Sprintf("%+v %v %s %+v", c.TLS, c.H2C, c.UpstreamProtocol, c.UpstreamTLS)}
}
