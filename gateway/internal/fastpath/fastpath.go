package fastpath

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
	"github.com/ratekeeper/ratekeeper/gateway/internal/problem"
	"github.com/ratekeeper/ratekeeper/gateway/internal/upstream"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/rules"
)

// Settings are the fast path's bounds on clients and the upstream. The
// gateway fills every field from its file, with its defaults; a zero
// duration sets no bound.
type Settings struct {
	AllowEncodedSlash     bool          // paths.allow_encoded_slash
	ReadHeaderTimeout     time.Duration // client.read_header_timeout
	IdleTimeout           time.Duration // client.idle_timeout
	WriteTimeout          time.Duration // client.write_timeout
	ResponseHeaderTimeout time.Duration // upstream_timeouts.response_header
}

// Server is the gateway's fast path (client_transport: fast). It reads
// client connections itself. It serves the plain requests that make most
// of an API's traffic straight to the upstream, over the direct
// transport's connections. Plain is HTTP/1.1, an origin-form target, a
// Host, and no body or a small one with Content-Length. The decisions,
// headers, answers and forwarded request are those the middleware and
// httputil.ReverseProxy give. The request view is the same (the gateway's
// view.go).
//
// Anything else hands the connection, unread, to the net/http server that
// serves HandOff. That is HTTP/1.0, upgrades, chunked or large bodies,
// Expect, a queue rule, a head that is not plain, or a target or header
// the view refuses. Its bytes are read again there, from the start of that
// request. A connection handed off stays with net/http.
//
// What it saves per request is net/http's per-request machinery. That is
// the header maps, the request and response objects, and ReverseProxy's
// copies of both headers. It is also the background read that watches for
// a client that leaves: the fast path starts one only for an upstream
// slower than watchAfter. It does not speak HTTP/2.
//
// Create a Server with New and set its exported fields before Serve.
type Server struct {
	// Accepted, if not nil, counts the connections the fast path read.
	Accepted interface{ Inc() }
	// OnPanic is given a panic a connection recovered (which is logged
	// too), and OnHandOff is told of each hand-off to net/http; both for
	// tests, and nil otherwise.
	OnPanic   func(any)
	OnHandOff func()
	// HandOffAll, if not nil, is asked before each request: true hands
	// the connection to net/http (which logs what the fast path does not).
	HandOffAll func() bool
	// H2, if not nil, serves the HTTP/2 connections in net/http's place:
	// h2 by ALPN over TLS, and with H2C the h2c preface (handoff.go).
	H2  interface{ ServeConn(net.Conn, *bufio.Reader) }
	H2C bool

	mw       *httplimit.Middleware
	up       *upstream.Transport
	upstream string // the upstream URL, redacted, for logs and 502s
	prefix   string // the upstream URL's path, joined before each target
	host     string // the Host the upstream is sent
	logger   *slog.Logger
	handoff  *handoffListener
	settings Settings
	date     atomic.Pointer[cachedDate]

	mu       sync.Mutex
	conns    map[*conn]struct{}
	closing  atomic.Bool
	inFlight sync.WaitGroup
}

// New returns the fast path to target over up, deciding with mw. It
// returns nil when the target cannot take it: a query in the upstream URL,
// which net/http merges. addr is the address it serves, which HandOff's
// listener reports.
func New(mw *httplimit.Middleware, up *upstream.Transport, target *url.URL, s Settings, logger *slog.Logger, addr net.Addr) *Server {
	if up == nil || target.RawQuery != "" || target.RawPath != "" {
		return nil
	}
	prefix := target.EscapedPath() // as ReverseProxy joins it
	if len(prefix) > 0 && prefix[len(prefix)-1] == '/' {
		prefix = prefix[:len(prefix)-1]
	}
	return &Server{
		mw:       mw,
		up:       up,
		upstream: target.Redacted(),
		prefix:   prefix,
		host:     target.Host,
		logger:   logger,
		handoff:  newHandoffListener(addr),
		settings: s,
		conns:    map[*conn]struct{}{},
	}
}

// HandOff is the listener of the net/http server that serves what the
// fast path does not: the connections it hands off.
func (f *Server) HandOff() net.Listener { return f.handoff }

// Serve accepts connections from ln until it is closed.
func (f *Server) Serve(ln net.Listener) error {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if f.closing.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors, most likely: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			f.logger.Warn("accept failed; retrying", "err", err, "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if f.Accepted != nil {
			f.Accepted.Inc()
		}
		c := f.newConn(nc)
		if c == nil {
			nc.Close()
			continue
		}
		go c.serve()
	}
}

// Shutdown closes the idle connections and waits, until ctx is done, for
// the requests in flight; their connections close after them. The caller
// closes the listener Serve reads.
func (f *Server) Shutdown(ctx context.Context) error {
	f.closing.Store(true)
	f.mu.Lock()
	for c := range f.conns {
		c.closeIfIdle()
	}
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.inFlight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connection states.
const (
	connIdle int32 = iota
	connActive
	connClosed
)

// conn is one client connection on the fast path, with everything a
// request needs kept from one request to the next.
type conn struct {
	f      *Server
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	state  atomic.Int32
	peer   string // the peer's address, as X-Forwarded-For gets it
	remote string // as http.Request.RemoteAddr

	set  *rules.Set // the rules the headers below were read for
	want []string   // the headers set reads
	all  bool       // set may read any header: hand every request off

	head h1.ReqHead
	resp h1.RespHead
	req  http.Request
	url  url.URL
	hdr  http.Header
	w    writer
	// The previous request's strings, reused when this one's are equal:
	// the path as sent, as the rules see it, and as the upstream is sent
	// it ("" when that is the path as sent).
	last  struct{ raw, path, norm, host string }
	lastV [][]string
	respN int    // bytes of the response head in the upstream's buffer
	out   []byte // the response head being built

	headDeadline time.Time // by when the request being read must be whole
	writeBy      time.Time // the write deadline set last
	sock         *socket   // the client's socket, under TLS if any; or nil

	// Watching for a client that leaves while the upstream works, and for
	// an upstream slower than response_header.
	watch    *time.Timer
	watching sync.WaitGroup
	sent     time.Time                     // when the request was sent
	upstream atomic.Pointer[upstream.Conn] // the connection the request is on
	fired    atomic.Bool                   // the watch started
	gone     atomic.Bool                   // the client left
}

// watchAfter is how long the fast path waits for an upstream's answer
// before it watches for a client that leaves meanwhile: most answers come
// sooner, and cost no goroutine.
const watchAfter = 50 * time.Millisecond

// watchClient starts the watch over a request sent upstream. Most answers
// come within watchAfter and cost nothing more. Past it, a goroutine
// bounds the wait for the answer's head by response_header (a read
// deadline on the upstream connection). It also waits for the client's
// connection to say something, as net/http's server does with a read in
// the background. End of file or an error means the client left. The
// upstream request is then cancelled (its connection closed), so that it
// holds no upstream connection for nobody. Bytes mean the client is still
// there.
func (c *conn) watchClient() {
	c.gone.Store(false)
	c.fired.Store(false)
	c.upstream.Store(nil)
	c.sent = time.Now()
	c.watching.Add(1)
	if c.watch == nil {
		c.watch = time.AfterFunc(watchAfter, func() {
			defer c.watching.Done()
			c.fired.Store(true)
			if u := c.upstream.Load(); u != nil {
				c.boundHead(u)
			}
			if clientLeft(c.nc) {
				c.gone.Store(true)
				if u := c.upstream.Load(); u != nil {
					u.Cancel()
				}
			}
		})
		return
	}
	c.watch.Reset(watchAfter)
}

// boundHead bounds the wait for u's answer by response_header, from when
// the request was sent.
func (c *conn) boundHead(u *upstream.Conn) {
	if d := c.f.settings.ResponseHeaderTimeout; d > 0 {
		u.SetReadDeadline(c.sent.Add(d))
	}
}

// unwatchClient ends the watch, and reports whether the client left.
func (c *conn) unwatchClient() bool {
	if c.watch.Stop() {
		c.watching.Done() // it never ran
		return false
	}
	c.nc.SetReadDeadline(time.Unix(1, 0)) // ends its wait
	c.watching.Wait()
	if u := c.upstream.Load(); u != nil {
		u.SetReadDeadline(time.Time{}) // the body may take its time
	}
	c.upstream.Store(nil)
	return c.gone.Load()
}

func (f *Server) newConn(nc net.Conn) *conn {
	c := &conn{f: f, nc: nc, remote: nc.RemoteAddr().String()}
	if ap, err := netip.ParseAddrPort(c.remote); err == nil {
		c.peer = ap.Addr().String()
	} else if h, _, err := net.SplitHostPort(c.remote); err == nil {
		c.peer = h
	} else {
		c.peer = c.remote
	}
	c.state.Store(connActive) // until serve has set the idle deadline
	c.hdr = http.Header{}
	c.w.h = http.Header{}
	c.req = http.Request{Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, RemoteAddr: c.remote}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing.Load() {
		return nil
	}
	f.conns[c] = struct{}{}
	f.inFlight.Add(1)
	return c
}

// closeIfIdle closes c if it is waiting for a request; one being served
// closes after its response.
func (c *conn) closeIfIdle() {
	if c.state.CompareAndSwap(connIdle, connClosed) {
		c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

func (c *conn) done(handedOff bool) {
	f := c.f
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	if !handedOff {
		c.nc.Close()
	}
	f.inFlight.Done()
}

// serve reads and serves requests until the connection ends or is handed
// off.
func (c *conn) serve() {
	handedOff := false
	defer func() { c.done(handedOff) }()
	defer func() {
		// As net/http does for a handler: a panic ends this connection,
		// not the gateway.
		if p := recover(); p != nil {
			if c.f.OnPanic != nil {
				c.f.OnPanic(p)
			}
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.f.logger.Error("panic serving a connection", "remote", c.remote, "panic", fmt.Sprint(p), "stack", string(buf))
			handedOff = false
		}
	}()
	if tc, ok := c.nc.(*tls.Conn); ok {
		// The handshake is bounded as the first request's head is, and
		// HTTP/2 agreed by ALPN is net/http's to serve, from its first
		// frame.
		tc.SetDeadline(time.Now().Add(c.f.settings.ReadHeaderTimeout))
		if tc.Handshake() != nil {
			return
		}
		tc.SetDeadline(time.Time{})
		st := tc.ConnectionState()
		if st.NegotiatedProtocol == "h2" {
			handedOff = c.handOffH2(tc)
			return
		}
		c.req.TLS = &st
	}
	c.attachSocket()
	c.br = bufio.NewReaderSize(c.nc, h1.MaxBody)
	c.bw = bufio.NewWriterSize(c.nc, 4<<10)
	wait := c.f.settings.ReadHeaderTimeout // the first request, as net/http waits for it
	for first := true; ; first = false {
		// Idle: wait for a request, as long as the idle timeout. The
		// deadline is set before the connection is marked idle, so that a
		// shutdown's deadline (closeIfIdle) is never overwritten.
		c.nc.SetReadDeadline(time.Now().Add(wait))
		c.headDeadline = time.Time{} // a later request's runs from its first byte
		if first {
			c.headDeadline = time.Now().Add(wait)
		}
		wait = c.f.settings.IdleTimeout
		c.state.Store(connIdle)
		if c.f.closing.Load() && c.state.CompareAndSwap(connIdle, connClosed) {
			return
		}
		if c.awaitRequest() != nil {
			return
		}
		if !c.state.CompareAndSwap(connIdle, connActive) {
			return // shut down while idle
		}
		res, err := c.readRequest(first)
		if err != nil {
			return
		}
		if res == h1.HandOff {
			handedOff = c.handOff()
			return
		}
		keep, deferred := c.serveRequest()
		if deferred {
			handedOff = c.handOff()
			return
		}
		c.br.Discard(c.head.N + c.head.ContentLength)
		if !keep || c.f.closing.Load() {
			return
		}
	}
}

// awaitRequest waits for the next request's first byte. The end of the
// last response goes out with the read (see flushResponse), or at once
// when no read of the socket was needed.
func (c *conn) awaitRequest() error {
	_, err := c.br.Peek(1)
	if err == nil && c.sock != nil {
		err = c.sock.flush()
	}
	return err
}

// readRequest waits, as long as the header timeout, for a whole head and
// body in the buffer, and parses the head. The first request's timeout
// runs from the connection's start (it is set already); a later one's
// from its first byte.
func (c *conn) readRequest(first bool) (h1.ParseResult, error) {
	if set := c.f.mw.Rules(); set != c.set {
		c.set = set
		c.want, c.all = set.HeadersRead()
		c.lastV = make([][]string, len(c.want))
	}
	if c.all || c.f.HandOffAll != nil && c.f.HandOffAll() {
		return h1.HandOff, nil
	}
	timed := first
	for {
		b, _ := c.br.Peek(c.br.Buffered())
		res := h1.ParseRequest(b, &c.head, c.want)
		if res == h1.Parsed && c.head.N+c.head.ContentLength > c.br.Size() {
			return h1.HandOff, nil
		}
		if res == h1.Parsed && c.head.N+c.head.ContentLength <= len(b) || res == h1.HandOff {
			return res, nil
		}
		if len(b) == c.br.Size() {
			return h1.HandOff, nil // a head larger than the buffer: net/http reads up to 1 MB
		}
		if !timed {
			c.headDeadline = time.Now().Add(c.f.settings.ReadHeaderTimeout)
			c.nc.SetReadDeadline(c.headDeadline)
			timed = true
		}
		if _, err := c.br.Peek(len(b) + 1); err != nil {
			return 0, err
		}
	}
}

// handOff gives the connection, with what is buffered unread, to net/http.
func (c *conn) handOff() bool {
	if c.f.OnHandOff != nil {
		c.f.OnHandOff()
	}
	if c.sock != nil && c.sock.flush() != nil {
		return false
	}
	c.nc.SetReadDeadline(time.Time{})
	if c.giveH2C() {
		return true
	}
	// net/http's header timeout runs on from where the fast path's was.
	return c.f.handoff.give(&bufferedConn{Conn: c.nc, r: c.br, headDeadline: c.headDeadline})
}

// serveRequest decides the request in c.head and answers it. keep is false
// when the connection must close after it; deferred when net/http must
// serve it (a queue rule matched).
func (c *conn) serveRequest() (keep, deferred bool) {
	h := &c.head
	buf, _ := c.br.Peek(h.N + h.ContentLength)
	if string(h.Path) != c.last.raw {
		path, norm, err := NormalizeTarget(string(h.Path), c.f.settings.AllowEncodedSlash)
		if err != nil {
			return false, true // the request view on net/http's path answers 400
		}
		if norm == string(h.Path) {
			norm = ""
		}
		c.last.raw, c.last.path, c.last.norm = string(h.Path), path, norm
	}
	if string(h.Host) != c.last.host {
		c.last.host = string(h.Host)
	}
	c.url = url.URL{Path: c.last.path}
	if q := h.Target[len(h.Path):]; len(q) > 0 && bytes.Contains(q, []byte("_method=")) {
		c.url.RawQuery = string(q[1:]) // a POST's method override, which rules read
	}
	clear(c.hdr)
	for k, name := range c.want {
		spans := h.Want[k]
		if len(spans) == 0 {
			continue
		}
		if len(spans) > 1 && name != "X-Forwarded-For" && name != "Forwarded" {
			return false, true // a header the rules read, twice: net/http's path answers 400
		}
		vs := c.lastV[k]
		same := len(vs) == len(spans)
		for j := 0; same && j < len(spans); j++ {
			same = vs[j] == string(buf[spans[j].Start:spans[j].End])
		}
		if !same {
			vs = make([]string, len(spans))
			for j, s := range spans {
				vs[j] = string(buf[s.Start:s.End])
			}
			c.lastV[k] = vs
		}
		c.hdr[name] = vs
	}
	r := &c.req
	r.Method, r.URL, r.Host, r.Header = h.Method, &c.url, c.last.host, c.hdr
	r.ContentLength = int64(h.ContentLength)
	clear(c.w.h)
	c.w.status, c.w.body = 0, c.w.body[:0]
	switch c.f.mw.Admit(&c.w, r, c.set) {
	case httplimit.Deferred:
		return false, true
	case httplimit.Answered:
		return c.answer(h.Close), false
	}
	return c.forward(buf), false
}

// NormalizeTarget returns the path the rules see (decoded) and the one the
// upstream is sent (escaped) for a request's escaped path, or the error
// for which the request view refuses it (400). It is the view's one rule
// for a path, on the fast path and on net/http's (the gateway's view.go).
func NormalizeTarget(escaped string, allowEncodedSlash bool) (path, rawPath string, err error) {
	norm, err := rules.NormalizePath(escaped, allowEncodedSlash)
	if err != nil {
		return "", "", err
	}
	path, err = url.PathUnescape(norm)
	if err != nil {
		return "", "", err // cannot happen: NormalizePath checked the escapes
	}
	return path, norm, nil
}

var errClientGone = errors.New("the client left")

// answer writes the middleware's own answer (429, 403) or a 502.
func (c *conn) answer(closing bool) bool {
	w := &c.w
	if w.status == 0 {
		w.status = http.StatusOK
	}
	closing = closing || c.f.closing.Load()
	c.writeDeadline()
	b := h1.AppendStatus(c.out[:0], w.status)
	b = h1.AppendHeaderMap(b, w.h)
	if _, ok := w.h["Date"]; !ok {
		b = c.f.appendDate(b)
	}
	if _, ok := w.h["Content-Length"]; !ok {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(w.body)), 10)
		b = append(b, "\r\n"...)
	}
	if closing {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	c.out = b
	c.bw.Write(b)
	if c.head.Method != http.MethodHead {
		c.bw.Write(w.body) // net/http's server sends a HEAD's answer bodiless
	}
	return c.flushResponse(closing) == nil && !closing
}

// forward sends the request to the upstream and its response to the
// client. buf holds the request's head and body.
func (c *conn) forward(buf []byte) bool {
	h := &c.head
	retry := h.ContentLength == 0 && (h.Method == http.MethodGet || h.Method == http.MethodHead || h.Method == http.MethodOptions)
	var (
		u   *upstream.Conn
		err error
	)
	c.watchClient()
	for attempt := 0; ; attempt++ {
		u, err = c.f.up.Get(context.Background(), attempt == 0)
		if err != nil {
			break
		}
		c.upstream.Store(u)
		if c.fired.Load() {
			c.boundHead(u) // a retry, after the watch started
		}
		if c.gone.Load() {
			err = errClientGone
			u.Close()
			break
		}
		// The response heads, 1xx included, are bounded as the direct
		// transport bounds them; the body is not.
		u.BoundHead()
		err = c.writeUpstream(u, buf)
		if err == nil {
			err = c.readHead(u)
		}
		u.Unbound()
		if err == nil {
			break
		}
		u.Close()
		if !(attempt == 0 && retry && u.Stale()) {
			break
		}
	}
	if c.unwatchClient() {
		if err == nil {
			u.Close()
		}
		return false // the client left: the upstream's answer has no one to go to
	}
	if err != nil {
		c.f.logger.Warn("upstream unreachable", "upstream", c.f.upstream, "method", h.Method, "path", c.last.path, "err", err)
		c.w.status, c.w.body = 0, c.w.body[:0]
		problem.BadGateway(&c.w, c.f.upstream, err)
		return c.answer(h.Close)
	}
	keep, err := c.relay(u)
	if err != nil {
		u.Close()
		return false
	}
	return keep
}

// hasAnyName reports whether the header line is one of the fields named
// in lower.
func hasAnyName(line []byte, lower []string) bool {
	for _, n := range lower {
		if h1.HasName(line, n) {
			return true
		}
	}
	return false
}

// writeUpstream writes the request as httputil.ReverseProxy would send it.
// That is the target joined to the upstream's path, the upstream's Host,
// and the client's end-to-end headers. Then come X-Forwarded-For (the
// peer, after what a trusted proxy said), X-Forwarded-Host and
// X-Forwarded-Proto.
func (c *conn) writeUpstream(u *upstream.Conn, buf []byte) error {
	h := &c.head
	w := u.W
	c.writeRequestLine(w)
	if h.Method == http.MethodHead {
		// The connection ends with the answer: an upstream that writes
		// the body it declared anyway cannot answer another request.
		w.WriteString("Connection: close\r\n")
	}
	c.writeClientHeaders(w, buf)
	c.writeForwarded(w, buf)
	// Content-Length as net/http writes it: in decimal, and for an empty
	// body too with the methods that usually have one.
	if h.ContentLength > 0 || h.Method == http.MethodPost || h.Method == http.MethodPut || h.Method == http.MethodPatch {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.Itoa(h.ContentLength))
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(buf[h.N : h.N+h.ContentLength])
	return u.Send() // written as the answer is awaited
}

// writeRequestLine writes the request line, with the path the rules saw,
// and the upstream's Host.
func (c *conn) writeRequestLine(w *bufio.Writer) {
	h := &c.head
	w.WriteString(h.Method)
	w.WriteByte(' ')
	w.WriteString(c.f.prefix)
	if c.last.norm != "" {
		w.WriteString(c.last.norm) // the path the rules saw
		w.Write(h.Target[len(h.Path):])
	} else {
		w.Write(h.Target)
	}
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(c.f.host)
	w.WriteString("\r\n")
}

// writeClientHeaders writes the client's end-to-end header lines as
// net/http would pass them on. It leaves out Content-Length, which
// writeUpstream writes itself. It writes the first User-Agent only, and
// none when empty. It drops the over_limit headers, which the middleware
// alone sets, and a tier or offset header from a client the rules do not
// trust.
func (c *conn) writeClientHeaders(w *bufio.Writer, buf []byte) {
	agent := false
	// The upstream would believe a plan or offset the rules did not.
	var drop []string
	if set := c.set; len(set.ProxyHeaders()) > 0 || len(set.OverLimitHeaders()) > 0 {
		drop = set.DropNames(len(set.ProxyHeaders()) == 0 || set.ClientIP().Trusts(&c.req))
	}
	for _, s := range c.head.Lines {
		line := buf[s.Start:s.End]
		if drop != nil && hasAnyName(line, drop) {
			continue
		}
		switch line[0] | 0x20 {
		case 'c':
			if h1.HasName(line, "content-length") {
				continue
			}
		case 'u':
			if h1.HasName(line, "user-agent") {
				first := !agent
				agent = true
				if !first || len(bytesTrimSpace(line[len("user-agent:"):])) == 0 {
					continue
				}
			}
		}
		w.Write(line)
	}
	for _, h := range c.set.OverLimitHeaders() {
		if vs := c.hdr[h]; len(vs) > 0 { // set by the middleware: rule names
			w.WriteString(h)
			w.WriteString(": ")
			w.WriteString(vs[0])
			w.WriteString("\r\n")
		}
	}
}

// writeForwarded writes the forwarding headers: the client address
// headers and X-Forwarded-For from a trusted proxy only, the peer after
// them, then X-Forwarded-Host and X-Forwarded-Proto.
func (c *conn) writeForwarded(w *bufio.Writer, buf []byte) {
	h := &c.head
	trusted := (len(h.XFF) > 0 || len(h.IPLines) > 0) && c.f.mw.Rules().ClientIP().Trusts(&c.req)
	if trusted {
		for _, s := range h.IPLines {
			w.Write(buf[s.Start:s.End])
		}
	}
	w.WriteString("X-Forwarded-For: ")
	if trusted {
		for _, s := range h.XFF {
			w.Write(buf[s.Start:s.End])
			w.WriteString(", ")
		}
	}
	w.WriteString(c.peer)
	w.WriteString("\r\nX-Forwarded-Host: ")
	w.Write(h.Host)
	if c.req.TLS != nil {
		w.WriteString("\r\nX-Forwarded-Proto: https\r\n")
	} else {
		w.WriteString("\r\nX-Forwarded-Proto: http\r\n")
	}
}

// readHead reads the upstream's response head into c.resp, passing 1xx
// responses on to the client. The final head stays in u's buffer.
func (c *conn) readHead(u *upstream.Conn) error {
	for {
		b, err := u.PeekHead()
		if err != nil {
			return err
		}
		if err := h1.ParseResponse(b, &c.resp); err != nil {
			return err
		}
		if c.resp.Code >= 200 {
			c.respN = len(b)
			return nil
		}
		if c.resp.Code == http.StatusSwitchingProtocols {
			return errors.New("upstream switched protocols, which the request did not ask for")
		}
		c.bw.Write(c.responseHead(b, -1, false))
		if err := c.bw.Flush(); err != nil {
			return err
		}
		u.R.Discard(len(b))
	}
}

// responseHead builds the head the client gets for the upstream head b.
// It holds HTTP/1.1 and net/http's status text, the upstream's end-to-end
// headers, the rate limit headers, and Date if the upstream gave none.
// Last comes the framing of the body the client will get: Content-Length
// clen (none when -1), or chunked. A body the upstream ends by closing is
// sent chunked too, as net/http's server sends it.
func (c *conn) responseHead(b []byte, clen int64, closing bool) []byte {
	r := &c.resp
	out := h1.AppendStatus(c.out[:0], r.Code)
	for _, s := range r.Lines {
		if r.Dropped(b, s) {
			continue
		}
		if r.Trailer && !r.Chunked && h1.HasName(b[s.Start:s.End], "trailer") {
			continue
		}
		if r.Code == http.StatusNotModified && h1.HasName(b[s.Start:s.End], "content-type") {
			continue // net/http's server drops it from a 304
		}
		// Every line ends with CRLF, whatever the upstream ended it with.
		out = append(append(out, h1.TrimEOL(b[s.Start:s.End])...), "\r\n"...)
	}
	if r.Code >= 200 {
		out = h1.AppendHeaderMap(out, c.w.h)
		if !r.HasDate {
			out = c.f.appendDate(out)
		}
		if clen >= 0 {
			out = append(out, "Content-Length: "...)
			if clen == r.ContentLength && r.ContentLengthSpan.End > 0 {
				out = append(out, b[r.ContentLengthSpan.Start:r.ContentLengthSpan.End]...) // as ReverseProxy copies it
			} else {
				out = strconv.AppendInt(out, clen, 10)
			}
			out = append(out, "\r\n"...)
		}
		if (r.Chunked || r.ContentLength < 0) && !h1.Bodyless(c.head.Method, r.Code) {
			out = append(out, "Transfer-Encoding: chunked\r\n"...)
		}
		if closing {
			out = append(out, "Connection: close\r\n"...)
		}
	}
	out = append(out, "\r\n"...)
	c.out = out
	return out
}

// relay sends the response whose head c.resp holds to the client, then its
// body. It gives u back to the pool when it can serve again. keep reports
// whether the client connection stays open. An error means the response
// was cut short and both connections must close.
func (c *conn) relay(u *upstream.Conn) (keep bool, err error) {
	r := &c.resp
	n := c.respN
	head, _ := u.R.Peek(n)
	closing := c.head.Close || c.f.closing.Load()
	c.writeDeadline()
	var clen int64 = -1
	switch {
	case h1.Bodyless(c.head.Method, r.Code):
		if r.ContentLength >= 0 && r.Code >= 200 && r.Code != http.StatusNoContent && r.Code != http.StatusNotModified {
			clen = r.ContentLength // HEAD: the length a GET would have
		}
	case r.Chunked:
	case r.ContentLength >= 0:
		clen = r.ContentLength
	}
	c.bw.Write(c.responseHead(head, clen, closing))
	u.R.Discard(n)
	switch {
	case h1.Bodyless(c.head.Method, r.Code):
	case r.Chunked:
		err = c.copyChunked(u)
	case r.ContentLength >= 0:
		err = c.copyN(u, r.ContentLength)
	default:
		err = c.copyToEOFChunked(u)
	}
	if err != nil {
		return false, err
	}
	if err := c.flushResponse(closing); err != nil {
		c.finish(u, r.ContentLength >= 0 || r.Chunked || h1.Bodyless(c.head.Method, r.Code))
		return false, nil
	}
	c.finish(u, r.ContentLength >= 0 || r.Chunked || h1.Bodyless(c.head.Method, r.Code))
	return !closing, nil
}

// flushResponse flushes the end of a response. On a connection that
// stays open, the socket holds the bytes until the next request is read,
// and writes them with that read (see socket).
func (c *conn) flushResponse(closing bool) error {
	if closing || c.sock == nil {
		return c.bw.Flush()
	}
	c.sock.deferW = true
	err := c.bw.Flush()
	c.sock.deferW = false
	return err
}

// attachSocket finds c's socket wrapper under TLS (made by Sockets), or
// wraps a clear-text connection's socket in one.
func (c *conn) attachSocket() {
	if tc, ok := c.nc.(*tls.Conn); ok {
		c.sock, _ = tc.NetConn().(*socket)
		return
	}
	if c.sock = newSocket(c.nc); c.sock != nil {
		c.nc = c.sock
	}
}

// finish gives u back to the pool when its response ended where its
// framing said and the upstream keeps it open.
func (c *conn) finish(u *upstream.Conn, framed bool) {
	// After HEAD (sent with Connection: close), an upstream that writes
	// the body it declared anyway would answer the next request with it:
	// the connection is not reused, even if the upstream keeps it open.
	u.Release(framed && !c.resp.Close && c.head.Method != http.MethodHead)
}

// writeDeadline bounds the writes to the client from now by write_timeout:
// a client that stops reading fails them, and its upstream connection is
// given up.
//
// The deadline moves only when it would move by an eighth of the timeout,
// so that most requests on a busy connection set none: a stalled write is
// still cut off within the timeout.
func (c *conn) writeDeadline() {
	if d := c.f.settings.WriteTimeout; d > 0 {
		if t := time.Now().Add(d); t.Sub(c.writeBy) > d/8 {
			c.nc.SetWriteDeadline(t)
			c.writeBy = t
		}
	}
}

// fill returns what u has buffered, reading more (after flushing what the
// client is owed, so that a stream reaches it as it comes) when there is
// nothing.
func (c *conn) fill(u *upstream.Conn) ([]byte, error) {
	c.writeDeadline()
	if u.R.Buffered() == 0 {
		if err := c.bw.Flush(); err != nil {
			return nil, err
		}
		if _, err := u.R.Peek(1); err != nil {
			return nil, err
		}
	}
	return u.R.Peek(u.R.Buffered())
}

func (c *conn) copyN(u *upstream.Conn, n int64) error {
	for n > 0 {
		b, err := c.fill(u)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if int64(len(b)) > n {
			b = b[:n]
		}
		if _, err := c.bw.Write(b); err != nil {
			return err
		}
		u.R.Discard(len(b))
		n -= int64(len(b))
	}
	return nil
}

// copyToEOFChunked sends a body that ends when the upstream closes as a
// chunked body, one chunk per read.
func (c *conn) copyToEOFChunked(u *upstream.Conn) error {
	for {
		b, err := c.fill(u)
		if err == io.EOF {
			_, err = c.bw.WriteString("0\r\n\r\n")
			return err
		}
		if err != nil {
			return err
		}
		var size [20]byte
		c.bw.Write(strconv.AppendInt(size[:0], int64(len(b)), 16))
		c.bw.WriteString("\r\n")
		c.bw.Write(b)
		if _, err := c.bw.WriteString("\r\n"); err != nil {
			return err
		}
		u.R.Discard(len(b))
	}
}

// copyChunked passes a chunked body on as it is, checking its framing: each
// chunk's size line, its data and CRLF, then the last chunk and the
// trailer section up to its blank line.
func (c *conn) copyChunked(u *upstream.Conn) error {
	for {
		line, err := c.line(u)
		if err != nil {
			return err
		}
		size, digits, err := h1.ChunkSize(line)
		if err != nil {
			return err
		}
		c.bw.Write(digits)
		c.bw.WriteString("\r\n")
		if size == 0 {
			break
		}
		if err := c.copyN(u, size); err != nil {
			return err
		}
		crlf, err := c.line(u)
		if err != nil {
			return err
		}
		if string(crlf) != "\r\n" {
			return h1.ErrBadChunk // net/http's client wants exactly CRLF
		}
		c.bw.Write(crlf)
	}
	// The trailer section, read as net/http's client reads it: CRLF alone,
	// or, once CRLF CRLF is in sight within the buffer (the client waits
	// for that), field lines up to the first blank line. The lines are
	// passed on with CRLF, as net/http's server writes trailers.
	if u.R.Buffered() < 2 {
		if err := c.bw.Flush(); err != nil {
			return err
		}
	}
	if b, err := u.R.Peek(2); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	} else if string(b) == "\r\n" {
		c.bw.WriteString("\r\n")
		u.R.Discard(2)
		return nil
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	for n := 4; ; n++ {
		b, err := u.R.Peek(n)
		if len(b) == n && string(b[n-4:]) == "\r\n\r\n" {
			break
		}
		if err != nil {
			return h1.ErrBadChunk
		}
	}
	for {
		line, err := c.line(u)
		if err != nil {
			return err
		}
		field := h1.TrimEOL(line)
		if len(field) == 0 {
			c.bw.WriteString("\r\n")
			return nil
		}
		ok, drop := h1.TrailerField(field)
		if !ok {
			return h1.ErrBadChunk
		}
		if !drop {
			c.bw.Write(field)
			c.bw.WriteString("\r\n")
		}
	}
}

func bytesTrimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}

// line reads one line of a chunked body (at most the buffer's size), and
// returns it with its line end; it stays valid until the next read of u.
func (c *conn) line(u *upstream.Conn) ([]byte, error) {
	if u.R.Buffered() == 0 {
		if err := c.bw.Flush(); err != nil {
			return nil, err
		}
	}
	b, err := u.R.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, h1.ErrBadChunk
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return b, err
}

// writer collects the middleware's headers, and its answer when it
// answers itself.
type writer struct {
	h      http.Header
	status int
	body   []byte
}

func (w *writer) Header() http.Header { return w.h }

func (w *writer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *writer) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, p...)
	return len(p), nil
}

// appendDate appends a Date header; the text is made once a second.
func (f *Server) appendDate(b []byte) []byte {
	now := time.Now()
	d := f.date.Load()
	if d == nil || d.sec != now.Unix() {
		d = &cachedDate{sec: now.Unix(), text: "Date: " + now.UTC().Format(http.TimeFormat) + "\r\n"}
		f.date.Store(d)
	}
	return append(b, d.text...)
}

type cachedDate struct {
	sec  int64
	text string
}
