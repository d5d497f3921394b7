package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/fastpath"
	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
	"github.com/ratekeeper/ratekeeper/gateway/internal/h2"
	"github.com/ratekeeper/ratekeeper/gateway/internal/problem"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/rules"
)

// The request view: what the rules see of a request is what the upstream
// acts on, on every client path. The fast path (internal/fastpath) serves
// only requests whose view it builds the same way. It shares the rule for
// a path (fastpath.NormalizeTarget) and for a Host (h1.ValidHost). It
// hands every other request to net/http, where view below builds it
// before the middleware decides.
//
// Paths: the path is normalized (rules.NormalizePath), and the normalized
// path is what the upstream receives. An ambiguous one is refused with
// 400. Methods, hosts and path forms are compared by the rules themselves
// (rules/path.go), the same for any server that hands them a request.
//
// Headers the rules read: each may appear once (400), for which of two
// would the upstream believe? The forwarding header, which proxies append
// to, is the exception: ClientIP reads it whole. A value may not begin or
// end with white space (400). HTTP/2 carries it, and an HTTP/1.1 upstream
// trims it.
//
// The request line: the method is a token and the target has no space
// (400). HTTP/2 can carry either, and the upstream's request line cannot.
// CONNECT and an HTTP/2 preface that net/http does not serve (no h2c) are
// refused: the gateway is no tunnel. HTTP/2 requests (over TLS, or h2c)
// take this same view. Their :authority is the Host, and a Host header
// naming another is refused.
//
// Hop by hop: these headers are removed before any rule reads them, as
// httputil.ReverseProxy removes them (dropHopByHop). They are the headers
// Connection names, Keep-Alive, TE (but trailers), Proxy-* and their kin.
// A header a client names in Connection never reaches the upstream, so no
// rule may count it. An Upgrade to anything but WebSocket is dropped, and
// the request served without it. Inside h2c above all, no request would
// be counted. A request with Transfer-Encoding closes its connection after
// the answer. net/http drops a Content-Length sent beside it, and RFC 9112
// requires closing a connection whose request had both. A request's
// trailers are not announced to the upstream: ReverseProxy never sends
// their values, and a name could be an over_limit header's.
//
// Client addresses: headers that name one (X-Real-IP and its kin) reach
// the upstream only from a trusted proxy, as X-Forwarded-For does.

// settings are the gateway's bounds on clients and the upstream, with
// their defaults filled in.
type settings struct {
	allowEncodedSlash bool
	readHeader        time.Duration
	idle              time.Duration
	bodyTimeout       time.Duration
	grpcIdle          time.Duration
	writeTimeout      time.Duration
	bodyBuffer        int // 0: stream every body
	maxConnsPerIP     int // 0: no cap
	dial              time.Duration
	responseHeader    time.Duration
	upstreamIdle      time.Duration
	grpc              bool // the upstream speaks HTTP/2: gRPC calls stream to it
}

// Defaults of the client and upstream bounds (docs/security.md).
const (
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultIdleTimeout           = 60 * time.Second
	DefaultBodyTimeout           = 30 * time.Second
	DefaultGRPCIdleTimeout       = 5 * time.Minute
	DefaultWriteTimeout          = 60 * time.Second
	DefaultBodyBuffer            = 64 << 10
	DefaultMaxConnsPerIP         = 1024
	DefaultDialTimeout           = 10 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultUpstreamIdleTimeout   = 60 * time.Second
)

func settingsOf(c *Config) settings {
	or := func(d rules.Duration, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return time.Duration(d)
	}
	count := func(n, def int) int {
		switch n {
		case 0:
			return def
		case -1:
			return 0
		}
		return n
	}
	return settings{
		allowEncodedSlash: c.Paths.AllowEncodedSlash,
		readHeader:        or(c.Client.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		idle:              or(c.Client.IdleTimeout, DefaultIdleTimeout),
		bodyTimeout:       or(c.Client.BodyTimeout, DefaultBodyTimeout),
		grpcIdle:          or(c.Client.GRPCIdleTimeout, DefaultGRPCIdleTimeout),
		writeTimeout:      or(c.Client.WriteTimeout, DefaultWriteTimeout),
		bodyBuffer:        count(c.Client.BodyBuffer, DefaultBodyBuffer),
		maxConnsPerIP:     count(c.Client.MaxConnsPerIP, DefaultMaxConnsPerIP),
		dial:              or(c.UpstreamTimeouts.Dial, DefaultDialTimeout),
		responseHeader:    or(c.UpstreamTimeouts.ResponseHeader, DefaultResponseHeaderTimeout),
		upstreamIdle:      or(c.UpstreamTimeouts.Idle, DefaultUpstreamIdleTimeout),
		grpc:              c.UpstreamProtocol == ProtocolH2 && c.Upstream != Demo,
	}
}

// fastPath are the bounds the fast path keeps.
func (s settings) fastPath() fastpath.Settings {
	return fastpath.Settings{
		AllowEncodedSlash:     s.allowEncodedSlash,
		ReadHeaderTimeout:     s.readHeader,
		IdleTimeout:           s.idle,
		WriteTimeout:          s.writeTimeout,
		ResponseHeaderTimeout: s.responseHeader,
	}
}

// h2 are the bounds the HTTP/2 server keeps.
func (s settings) h2() h2.Settings {
	return h2.Settings{
		AllowEncodedSlash:     s.allowEncodedSlash,
		ReadHeaderTimeout:     s.readHeader,
		IdleTimeout:           s.idle,
		WriteTimeout:          s.writeTimeout,
		ResponseHeaderTimeout: s.responseHeader,
	}
}

// clientIPHeaders name the client's address to upstreams that believe
// them; like X-Forwarded-For, they are passed on from trusted proxies only.
var clientIPHeaders = rules.ClientAddressHeaders()

// ruleHeaders are the names of the headers a rules set reads, but for the
// forwarding header, cached per set.
type ruleHeaders struct {
	set   *rules.Set
	names []string
}

func (g *Gateway) ruleHeaders() []string {
	set := g.mw.Rules()
	if rh := g.headers.Load(); rh != nil && rh.set == set {
		return rh.names
	}
	names, _ := set.HeadersRead()
	fwd := set.ClientIP().Header
	rh := &ruleHeaders{set: set}
	for _, n := range names {
		if n != fwd && n != "X-Forwarded-For" && n != "Forwarded" {
			rh.names = append(rh.names, n)
		}
	}
	g.headers.Store(rh)
	return rh.names
}

// view builds the request view on the net/http path and hands the request
// to next, or refuses it.
func (g *Gateway) view(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !checkHead(w, r) {
			return
		}
		if r.TLS == nil {
			if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok {
				r.TLS = st
			}
		}
		dropUnderscored(r.Header)
		if !g.normalizeTarget(w, r) {
			return
		}
		if up := r.Header["Upgrade"]; len(up) > 0 && !isWebSocket(up) {
			r.Header.Del("Upgrade")
		}
		r.Header.Del("Http2-Settings")
		dropHopByHop(r.Header)
		r.Trailer = nil
		if !g.checkRuleHeaders(w, r) {
			return
		}
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// checkHead refuses a method that is no token, CONNECT, the HTTP/2
// preface, and a Host that is not one or that differs from :authority.
// It reports whether r may go on.
func checkHead(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case !h1.IsToken(r.Method):
		// HTTP/2's :method may be any string. "GET " puts two
		// spaces in the upstream's request line, which nginx
		// reads as a GET that no rule on GET counted.
		problem.Write(w, http.StatusBadRequest, "Bad Request", "the method is not a token")
		return false
	case r.Method == http.MethodConnect:
		w.Header().Set("Connection", "close")
		problem.Write(w, http.StatusMethodNotAllowed, "Method Not Allowed", "the gateway does not tunnel: CONNECT is not forwarded")
		return false
	case r.Method == "PRI" || r.ProtoMajor > 2:
		// "PRI * HTTP/2.0", the HTTP/2 preface, which net/http hands
		// on when it does not serve h2c itself.
		w.Header().Set("Connection", "close")
		problem.Write(w, http.StatusHTTPVersionNotSupported, "HTTP Version Not Supported", "this listener speaks HTTP/2 only over TLS, or with h2c: true")
		return false
	case !h1.ValidHost(r.Host):
		problem.Write(w, http.StatusBadRequest, "Bad Request", "the Host is not a host name or address with an optional port")
		return false
	}
	if r.ProtoMajor == 2 {
		// :authority is the Host; a Host header beside it that names
		// another would be believed by some upstream (RFC 9113 8.3.1).
		if hs := r.Header["Host"]; len(hs) > 1 || len(hs) == 1 && !strings.EqualFold(hs[0], r.Host) {
			problem.Write(w, http.StatusBadRequest, "Bad Request", "the Host header differs from :authority")
			return false
		}
	}
	return true
}

// dropUnderscored removes the headers whose name has an underscore, as
// nginx does: CGI-style servers read X_User_ID as X-User-ID, which the
// rules never saw.
func dropUnderscored(h http.Header) {
	for k := range h {
		if strings.IndexByte(k, '_') >= 0 {
			delete(h, k)
		}
	}
}

// normalizeTarget puts the normalized path in r.URL, which is what the
// rules read and the upstream receives. It refuses a target with a space
// or an ambiguous path, and reports whether r may go on.
func (g *Gateway) normalizeTarget(w http.ResponseWriter, r *http.Request) bool {
	if strings.IndexByte(r.RequestURI, ' ') >= 0 {
		// Only HTTP/2's :path can hold a space; the query goes
		// upstream as it came, and a space would split its
		// request line.
		problem.Write(w, http.StatusBadRequest, "Bad Request", "the request target has a space")
		return false
	}
	path, raw, err := fastpath.NormalizeTarget(r.URL.EscapedPath(), g.settings.allowEncodedSlash)
	if err != nil {
		problem.Write(w, http.StatusBadRequest, "Bad Request", "the request target is refused: "+err.Error())
		return false
	}
	if path != r.URL.Path || raw != r.URL.EscapedPath() {
		u := *r.URL
		u.Path, u.RawPath = path, raw
		r.URL = &u
	}
	return true
}

// checkRuleHeaders refuses a request that gives a header the rules read
// twice, or with white space around its value, and reports whether r may
// go on.
func (g *Gateway) checkRuleHeaders(w http.ResponseWriter, r *http.Request) bool {
	for _, name := range g.ruleHeaders() {
		switch vs := r.Header[name]; {
		case len(vs) > 1:
			problem.Write(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("the %s header appears more than once, and rate limits read it", name))
			return false
		case len(vs) == 1 && strings.Trim(vs[0], " \t") != vs[0]:
			// Only HTTP/2 keeps it (RFC 9113, 8.2.1, calls it
			// malformed): the rules would count "alice " apart from
			// the "alice" an HTTP/1.1 upstream reads.
			problem.Write(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("the %s header's value begins or ends with white space, and rate limits read it", name))
			return false
		}
	}
	return true
}

// buffer reads the body of an admitted request (bufferBody) before next
// sends it upstream, and bounds each write of the answer by write_timeout.
// A body that stalls or ends short is answered here, at a rule's default
// cost (httplimit.Unserved).
// It runs after the decision, so that a refused request's body is never
// read (nor, with Expect: 100-continue, sent), unless a rule reads its
// reserve there.
func (g *Gateway) buffer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := g.settings.writeTimeout; d > 0 {
			w = newTimedWriter(w, d, r.ProtoMajor == 2)
		}
		if g.settings.grpc && httplimit.IsGRPC(r) {
			// A gRPC call's messages stream both ways and may rest
			// between them: read nothing ahead, and bound the stream as
			// streamGRPC says. To an HTTP/1.1 upstream, which speaks no
			// gRPC, the label is only a label: the body is read as any
			// other.
			g.streamGRPC(next, w, r)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			if err := g.bufferBody(w, r); err != nil {
				httplimit.Unserved(w) // never sent upstream
				switch {
				case r.ProtoMajor == 2 && r.Context().Err() == nil && errors.Is(err, errClientGone):
					// An HTTP/2 stream whose body ended before its
					// content-length: the client is there, and the
					// connection's other streams go on.
					problem.Write(w, http.StatusBadRequest, "Bad Request", "the request body does not match its Content-Length: "+err.Error())
				case errors.Is(err, errClientGone):
					// An HTTP/1 body that ended early: a client that only
					// stopped sending still reads the answer.
					w.Header().Set("Connection", "close")
					problem.Write(w, http.StatusBadRequest, "Bad Request", "the request body ended before its length: "+err.Error())
				default:
					// The connection closes: what is left of the body is
					// not read.
					if r.ProtoMajor == 1 {
						w.Header().Set("Connection", "close")
					}
					problem.Write(w, http.StatusRequestTimeout, "Request Timeout", "the request body did not arrive in time: "+err.Error())
				}
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// timedWriter bounds each write of an answer to the client: a client that
// stops reading fails the write after timeout, and the proxy then gives
// the upstream connection up.
//
// Over HTTP/1.1 each write sets the connection's write deadline, which
// only fails a write. Over HTTP/2 a write that outlasts timeout resets its
// stream (streamTimer), and a stream that pauses between writes (events, a
// gRPC stream) lives on.
type timedWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController // HTTP/1.1 only
	timeout time.Duration
	h2      bool
	stream  streamTimer // HTTP/2 only
}

func newTimedWriter(w http.ResponseWriter, timeout time.Duration, h2 bool) *timedWriter {
	if h2 {
		return &timedWriter{ResponseWriter: w, timeout: timeout, h2: true, stream: streamTimer{w: w}}
	}
	return &timedWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout}
}

func (w *timedWriter) Write(p []byte) (int, error) {
	if w.h2 {
		w.stream.start(w.timeout)
		defer w.stream.stop()
	} else {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	return w.ResponseWriter.Write(p)
}

func (w *timedWriter) FlushError() error {
	if w.h2 {
		w.stream.start(w.timeout)
		defer w.stream.stop()
		return http.NewResponseController(w.ResponseWriter).Flush()
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.rc.Flush()
}

// streamTimer bounds the writes to one HTTP/2 stream. Its timer is the
// handler's own: the stream hears of it only when a write outlasts its
// bound. Setting and lifting the stream's write deadline around each write
// would cost two messages to the connection's goroutine, and a timer there.
type streamTimer struct {
	w        http.ResponseWriter
	mu       sync.Mutex
	t        *time.Timer
	deadline time.Time // of the write under way; zero between writes
}

// start bounds the write about to begin by d.
func (s *streamTimer) start(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = time.Now().Add(d)
	if s.t == nil {
		s.t = time.AfterFunc(d, s.expire)
		return
	}
	s.t.Reset(d)
}

// stop lifts the bound of the write that has returned.
func (s *streamTimer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = time.Time{}
	s.t.Stop()
}

// expire resets the stream if a write is under way past its deadline: a
// write deadline in the past resets it at once. A timer that fires late,
// after that write, finds no deadline or a later one, and does nothing.
func (s *streamTimer) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); !s.deadline.IsZero() && !now.Before(s.deadline) {
		_ = http.NewResponseController(s.w).SetWriteDeadline(now.Add(-time.Second))
	}
}

// Unwrap lets ReverseProxy reach the connection's Hijack (upgrades, whose
// tunnel keeps no deadline: Write above is not called before it).
func (w *timedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hopHeaders are the hop-by-hop headers httputil.ReverseProxy removes from
// every request it forwards, whether Connection names them or not.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// dropHopByHop leaves in h the headers the upstream receives. It removes
// what httputil.ReverseProxy removes: the headers Connection names, and
// hopHeaders. It keeps what ReverseProxy writes again: TE: trailers, and
// the Connection and Upgrade of a protocol upgrade. ReverseProxy then
// finds nothing more to remove.
func dropHopByHop(h http.Header) {
	upgrade := ""
	if hasToken(h["Connection"], "upgrade") {
		upgrade = h.Get("Upgrade")
	}
	trailers := hasToken(h["Te"], "trailers")
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		delete(h, name)
	}
	if trailers {
		h["Te"] = []string{"trailers"}
	}
	if upgrade != "" {
		h["Connection"], h["Upgrade"] = []string{"Upgrade"}, []string{upgrade}
	}
}

// hasToken reports whether the comma-separated values hold token (in
// lower case), in any ASCII case, as ReverseProxy's
// httpguts.HeaderValuesContainsToken reads them: "trailerſ" is no
// "trailers".
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.Trim(t, " \t"); h1.EqualFoldASCII(t, token) {
				return true
			}
		}
	}
	return false
}

func isWebSocket(upgrade []string) bool {
	return len(upgrade) == 1 && strings.EqualFold(strings.TrimSpace(upgrade[0]), "websocket")
}

var errClientGone = errors.New("the client left")

// bufferBody reads a request body of up to body_buffer bytes whole, each
// read bounded by body_timeout, so that a client that sends it slowly holds
// no upstream connection. A larger body streams, each read still bounded.
func (g *Gateway) bufferBody(w http.ResponseWriter, r *http.Request) error {
	if r.ContentLength == 0 {
		// An HTTP/2 request without a body (END_STREAM on its HEADERS,
		// or content-length: 0, past which net/http resets the stream)
		// has nothing to read, nor to wait for: ReverseProxy sends none.
		r.Body = http.NoBody
		return nil
	}
	rc := http.NewResponseController(w)
	body := &timedBody{rc: rc, r: r.Body, timeout: g.settings.bodyTimeout}
	limit := g.settings.bodyBuffer
	if limit <= 0 || r.ContentLength > int64(limit) {
		r.Body = body
		return nil
	}
	n := limit
	if r.ContentLength >= 0 {
		n = int(r.ContentLength)
	}
	buf := make([]byte, 0, n+1)
	for len(buf) < cap(buf) {
		k, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			// Whole: the upstream gets it with its length, as nginx sends
			// a body it buffered.
			r.Body = bufferedBody{Reader: strings.NewReader(string(buf)), c: r.Body}
			r.ContentLength, r.TransferEncoding = int64(len(buf)), nil
			if len(buf) == 0 {
				r.Body = http.NoBody
			}
			return nil
		}
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("%w: %v", errClientGone, err)
			}
			return err
		}
	}
	// Longer than the buffer (a chunked body): what was read, then the rest.
	r.Body = bufferedBody{Reader: io.MultiReader(strings.NewReader(string(buf)), body), c: r.Body}
	return nil
}

// timedBody is a request body whose every read must complete within
// timeout; at its end the connection's read deadline is lifted, as net/http
// then reads in the background to notice a client that leaves. After any
// other error the deadline stays passed: closing the body makes net/http
// drain what is left of it, and without a deadline that waits as long as a
// stalled client likes (TestTimedBodyStallThenClose).
type timedBody struct {
	rc      *http.ResponseController
	r       io.ReadCloser
	timeout time.Duration
	done    atomic.Bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.done.Load() {
		return 0, io.EOF
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	n, err := b.r.Read(p)
	if err == io.EOF {
		_ = b.rc.SetReadDeadline(time.Time{})
		b.done.Store(true)
	}
	return n, err
}

func (b *timedBody) Close() error { return b.r.Close() }

// bufferedBody is a body read ahead; closing it closes the original.
type bufferedBody struct {
	io.Reader
	c io.Closer
}

func (b bufferedBody) Close() error { return b.c.Close() }
