package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
)

// Transport sends HTTP/1.1 requests to one upstream on the calling
// goroutine. It writes the request and reads the response headers itself,
// over a pool of keep-alive connections. http.Transport instead hands each
// request to a writer goroutine and takes the response from a reader
// goroutine. Those two goroutine switches each way are a measurable part
// of the proxy's CPU on a small machine. It uses net/http's own Request.Write and
// ReadResponse, so what goes on the wire is what http.Transport would send.
//
// An https:// upstream is spoken to over TLS (ALPN http/1.1), with the
// fallback's TLSClientConfig.
//
// Everything else goes to the fallback transport unchanged: another
// scheme or host, protocol upgrades (WebSocket), "Expect: 100-continue",
// and bodies of unknown length or over 32 KiB. So does every request when
// the fallback would send it through a proxy.
//
// A connection goes back to the pool when its response body has been read
// to the end. It is discarded after a body closed before its end, a
// "Connection: close", an error, or bytes the upstream sent beyond the
// response. Requests are
// retried once, on a new connection, only when nothing of a response came
// back on a pooled connection (the upstream closed it while idle) and the
// request is idempotent and has no body. Every pooled connection is checked
// before it is reused (see Get).
//
// The fast path, which writes requests and reads responses itself, takes
// its connections from the same pool with Get.
type Transport struct {
	fallback    http.RoundTripper
	scheme      string      // http or https
	tls         *tls.Config // https: the client's TLS; nil for http
	handshake   time.Duration
	host        string // the upstream URL's host, as requests carry it
	addr        string // host:port to dial
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration
	maxHeader   int64         // bytes of response headers, 1xx included
	respHeader  time.Duration // bound on the wait for a response head; 0: none

	mu     sync.Mutex
	idle   []*Conn // most recently used last
	closed bool
}

// New returns the direct transport to target, or nil when target is not
// an http:// or https:// URL it can serve (the caller then uses tr). It
// takes its settings from tr (TLSClientConfig included), and hands tr what
// it does not serve.
func New(target *url.URL, tr *http.Transport) *Transport {
	if target.Scheme != "http" && target.Scheme != "https" || target.Host == "" {
		return nil
	}
	if tr.Proxy != nil {
		if u, err := tr.Proxy(&http.Request{Method: http.MethodGet, URL: target, Header: http.Header{}}); err != nil || u != nil {
			return nil // through a forward proxy: http.Transport knows how
		}
	}
	port := target.Port()
	if port == "" {
		port = "80"
		if target.Scheme == "https" {
			port = "443"
		}
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t := &Transport{
		fallback:    tr,
		scheme:      target.Scheme,
		handshake:   tr.TLSHandshakeTimeout,
		host:        target.Host,
		addr:        net.JoinHostPort(target.Hostname(), port),
		dial:        d.DialContext,
		maxIdle:     tr.MaxIdleConnsPerHost,
		idleTimeout: tr.IdleConnTimeout,
		maxHeader:   tr.MaxResponseHeaderBytes,
		respHeader:  tr.ResponseHeaderTimeout,
	}
	if tr.DialContext != nil {
		t.dial = tr.DialContext
	}
	if t.maxIdle <= 0 {
		t.maxIdle = http.DefaultMaxIdleConnsPerHost
	}
	if t.maxHeader <= 0 {
		t.maxHeader = 10 << 20 // http.Transport's default
	}
	if target.Scheme == "https" {
		t.tls = &tls.Config{}
		if tr.TLSClientConfig != nil {
			t.tls = tr.TLSClientConfig.Clone()
		}
		if t.tls.ServerName == "" {
			t.tls.ServerName = target.Hostname()
		}
		t.tls.NextProtos = []string{"http/1.1"}
		if t.handshake <= 0 {
			t.handshake = 10 * time.Second
		}
	}
	return t
}

// serves reports whether req goes on the direct path.
func (t *Transport) serves(req *http.Request) bool {
	if req.URL.Scheme != t.scheme || req.URL.Host != t.host {
		return false
	}
	h := req.Header
	if _, ok := h["Upgrade"]; ok {
		return false
	}
	for _, v := range h["Connection"] {
		if strings.Contains(strings.ToLower(v), "upgrade") {
			return false
		}
	}
	for _, v := range h["Expect"] {
		if strings.EqualFold(strings.TrimSpace(v), "100-continue") {
			return false
		}
	}
	// The direct path writes the whole body before it reads the answer. An
	// upstream may answer early (413, 401) and neither read the rest nor
	// close, which leaves a large body's write blocked. So bodies that may
	// not fit in the sockets' buffers go to http.Transport, which reads the
	// answer while it writes.
	if req.ContentLength < 0 || req.ContentLength > maxBody {
		return req.Body == nil || req.Body == http.NoBody
	}
	return true
}

// maxBody is the largest request body the direct path sends, well
// under what a connection's send and receive buffers hold.
const maxBody = 32 << 10

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.serves(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	retry := mayRetry(req)
	for attempt := 0; ; attempt++ {
		c, err := t.Get(ctx, attempt == 0)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := c.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		// c is closed. A pooled connection that the upstream had closed
		// fails before it has sent a byte: then, and only then, a request
		// that is safe to repeat is sent again on a new connection.
		if attempt == 0 && retry && c.Stale() && ctx.Err() == nil {
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
}

// mayRetry reports whether req may be sent twice: an idempotent method and
// no body.
func mayRetry(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// CloseIdleConnections closes the pooled connections, and the fallback's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// Get returns a pooled connection (if pooled is true and one is there) or
// a new one. A pooled connection is first checked with a non-blocking peek
// at the socket. One the upstream closed is closed. So is one it wrote to
// while no request was outstanding (a stray response, a late body, a 408
// before closing): that is never read as the next request's answer.
func (t *Transport) Get(ctx context.Context, pooled bool) (*Conn, error) {
	if pooled {
		now := time.Now()
		for {
			t.mu.Lock()
			n := len(t.idle)
			if n == 0 {
				t.mu.Unlock()
				break
			}
			c := t.idle[n-1]
			t.idle[n-1] = nil
			t.idle = t.idle[:n-1]
			t.mu.Unlock()
			if t.idleTimeout > 0 && now.Sub(c.idleAt) > t.idleTimeout || !c.peek.alive() {
				c.nc.Close()
				continue
			}
			c.reused = true
			c.mu.Lock()
			c.released = false
			c.mu.Unlock()
			return c, nil
		}
	}
	nc, err := t.dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	if t.tls != nil {
		tc := tls.Client(nc, t.tls)
		tc.SetDeadline(time.Now().Add(t.handshake))
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		tc.SetDeadline(time.Time{})
		nc = tc
	}
	c := &Conn{t: t, nc: nc, peek: newPeeker(nc)}
	if rc := sendConn(nc); rc != nil {
		c.x = NewExchange(nc, rc)
	}
	c.R = bufio.NewReaderSize(c, 4<<10)
	c.W = bufio.NewWriterSize(connWriter{c}, 4<<10)
	return c, nil
}

// put returns c to the pool, or closes it when the pool is full. The
// oldest connection goes when it has been idle too long.
func (t *Transport) put(c *Conn) {
	c.idleAt = time.Now()
	c.reused = false
	var stale *Conn
	t.mu.Lock()
	if t.closed || len(t.idle) >= t.maxIdle {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	if len(t.idle) > 0 && t.idleTimeout > 0 && c.idleAt.Sub(t.idle[0].idleAt) > t.idleTimeout {
		stale = t.idle[0]
		copy(t.idle, t.idle[1:])
		t.idle[len(t.idle)-1] = nil
		t.idle = t.idle[:len(t.idle)-1]
	}
	t.idle = append(t.idle, c)
	t.mu.Unlock()
	if stale != nil {
		stale.nc.Close()
	}
}

// Conn is one connection to the upstream. It is the source of its own
// buffered reader, R, so that it can bound the response headers and count
// what arrived. A Conn serves one request at a time; Cancel may be called
// from another goroutine.
type Conn struct {
	// R reads what the upstream sends, within the header bound while one
	// is set (BoundHead); W writes to it.
	R *bufio.Reader
	W *bufio.Writer

	t      *Transport
	nc     net.Conn
	limit  int64 // bytes the reader may still take (the header bound)
	got    int64 // bytes read since BoundHead
	reused bool
	late   bool    // a read timed out: the upstream may be at work on the request
	grown  bool    // PeekHead replaced R with a larger reader
	peek   *peeker // checks the connection before it is reused
	idleAt time.Time

	// Send's request, written by the next read of the socket (x's
	// WriteRead); x is nil where Send is a plain flush.
	x       *Exchange
	deferW  bool
	pending []byte

	mu        sync.Mutex // orders the deadline changes of Cancel and roundTrip
	cancelled bool
	released  bool // Release pooled it: Cancel leaves it alone
}

var errHeaderTooLarge = errors.New("upstream response headers too large")

// Read reads from the connection within the header bound; it is R's
// source.
func (c *Conn) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	var n int
	var err error
	if c.pending != nil {
		out := c.pending
		c.pending = nil
		n, err = c.x.WriteRead(out, p)
	} else {
		n, err = c.nc.Read(p)
	}
	c.limit -= int64(n)
	c.got += int64(n)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.late = true
	}
	return n, err
}

// connWriter is W's destination: the connection, or Send's pending
// request.
type connWriter struct{ c *Conn }

func (w connWriter) Write(p []byte) (int, error) {
	if w.c.deferW {
		w.c.pending = p // W's buffer: nothing writes W before R reads
		return len(p), nil
	}
	return w.c.nc.Write(p)
}

// Send flushes W, where the caller's next step is to read the answer
// from R. On a plain TCP connection, the write then happens within R's
// first read: the wait for the answer follows the write at once, with no
// read that finds nothing first. A write error then comes from R's read.
func (c *Conn) Send() error {
	if c.x == nil || c.R.Buffered() > 0 {
		return c.W.Flush()
	}
	c.deferW = true
	err := c.W.Flush()
	c.deferW = false
	return err
}

// BoundHead starts a request on c, and Stale counts from here. The
// response heads that come back, 1xx included, are bounded by the
// transport's header bound. A reused connection's buffered bytes do not
// count against it.
func (c *Conn) BoundHead() {
	c.got = 0
	c.limit = c.t.maxHeader
}

// Unbound lifts the header bound once the final head is read: a body may
// be any length.
func (c *Conn) Unbound() { c.limit = math.MaxInt64 }

// Stale reports whether c, a pooled connection, failed before a byte of
// the response came back: the upstream closed it while it was idle. A
// request that is safe to repeat may then be sent again, on a new
// connection; on any other, the upstream may have acted on it. A read
// that timed out is no such failure.
func (c *Conn) Stale() bool { return c.reused && c.got == 0 && !c.late }

// Cancel interrupts the connection's I/O: the request's context is done,
// or its client left.
func (c *Conn) Cancel() {
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		return
	}
	c.cancelled = true
	c.mu.Unlock()
	c.nc.SetDeadline(time.Unix(1, 0))
}

// Close closes the connection: it is never pooled again.
func (c *Conn) Close() error { return c.nc.Close() }

// Release ends c's use for a request. c goes back to the pool when
// reusable: its response ended where its framing said, and the upstream
// keeps it open. Else it is closed, and so it is when the upstream sent
// bytes beyond the response, PeekHead grew its buffer, or it was Cancelled.
func (c *Conn) Release(reusable bool) {
	c.mu.Lock()
	reusable = reusable && !c.cancelled // its deadline has passed: Cancel may race the end
	c.released = reusable               // a later Cancel is not the next request's
	c.mu.Unlock()
	if reusable && !c.grown && c.R.Buffered() == 0 {
		c.t.put(c)
		return
	}
	c.nc.Close()
}

// PeekHead returns the upstream's next response head, up to and including
// its blank line, from R, whose buffer grows up to the header bound to
// hold it. The head stays in R.
func (c *Conn) PeekHead() ([]byte, error) {
	from := 0
	for {
		// Everything buffered (at least a byte): after the buffer grew,
		// that is the whole head so far, and from stays within it.
		if c.R.Buffered() == 0 {
			if _, err := c.R.Peek(1); err != nil {
				return nil, err
			}
		}
		b, _ := c.R.Peek(c.R.Buffered())
		for {
			j := bytes.IndexByte(b[from:], '\n')
			if j < 0 {
				break
			}
			j += from
			if j == 0 || j == 1 && b[0] == '\r' {
				return nil, h1.ErrBadResponse // a blank line where the status line goes
			}
			if b[j-1] == '\n' || b[j-1] == '\r' && j >= 2 && b[j-2] == '\n' {
				return b[:j+1], nil
			}
			from = j + 1
		}
		if len(b) == c.R.Size() {
			if int64(c.R.Size()) >= c.t.maxHeader {
				return nil, errHeaderTooLarge
			}
			// Grow the buffer: a new reader over the same connection,
			// primed with what the old one holds. The connection is not
			// pooled again (see Release).
			held := bytes.NewReader(append([]byte(nil), b...))
			c.R = bufio.NewReaderSize(io.MultiReader(held, c), int(min(2*int64(c.R.Size()), c.t.maxHeader)))
			c.grown = true
			continue
		}
		if _, err := c.R.Peek(len(b) + 1); err != nil {
			return nil, err
		}
	}
}

// roundTrip sends req and reads its response headers. On error it closes
// the connection.
func (c *Conn) roundTrip(req *http.Request) (*http.Response, error) {
	c.BoundHead()
	stop := context.AfterFunc(req.Context(), c.Cancel)
	hasBody := req.Body != nil && req.Body != http.NoBody
	err := req.Write(c.W) // closes req.Body
	if err == nil {
		err = c.W.Flush()
	}
	keep := true
	if err != nil {
		if !hasBody || req.Context().Err() != nil {
			stop()
			c.nc.Close()
			return nil, err
		}
		// The upstream may have answered without reading the whole body
		// (413, 401) and closed: its answer may still be there to read.
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		keep = false
	} else if d := c.t.respHeader; d > 0 {
		c.SetReadDeadline(time.Now().Add(d))
	}
	resp, rerr := c.readResponse(req)
	if rerr != nil {
		stop()
		c.nc.Close()
		if err != nil {
			return nil, err
		}
		return nil, rerr
	}
	if !keep || c.t.respHeader > 0 {
		c.SetReadDeadline(time.Time{})
	}
	c.Unbound()
	keep = keep && !resp.Close && !req.Close
	b := &body{c: c, rc: resp.Body, stop: stop, keep: keep}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// SetReadDeadline sets the connection's read deadline, unless Cancel has
// already ended its I/O.
func (c *Conn) SetReadDeadline(t time.Time) {
	c.mu.Lock()
	if !c.cancelled {
		c.nc.SetReadDeadline(t)
	}
	c.mu.Unlock()
}

// readResponse reads the final response, passing informational (1xx)
// responses to the request's trace, as http.Transport does.
func (c *Conn) readResponse(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	for {
		resp, err := http.ReadResponse(c.R, req)
		if err != nil {
			if errors.Is(err, errHeaderTooLarge) {
				return nil, fmt.Errorf("%w (over %d bytes)", errHeaderTooLarge, c.t.maxHeader)
			}
			return nil, err
		}
		code := resp.StatusCode
		if code < 100 || code >= 200 {
			return resp, nil
		}
		if code == http.StatusSwitchingProtocols {
			return nil, errors.New("upstream switched protocols, which the request did not ask for")
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
		}
	}
}

// body is a response body on the direct path: at its end it hands
// the connection back to the pool.
type body struct {
	c     *Conn
	rc    io.ReadCloser // net/http's body reader over c.R
	stop  func() bool   // stops the cancellation watch
	keep  bool          // the connection may serve another request
	state atomic.Int32  // bodyOpen, bodyDone, bodyClosed
}

const (
	bodyOpen = iota
	bodyDone
	bodyClosed
)

var errBodyClosed = errors.New("read on closed response body")

func (b *body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyDone:
		return 0, io.EOF
	case bodyClosed:
		return 0, errBodyClosed
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		if b.state.CompareAndSwap(bodyOpen, bodyDone) {
			b.finish(true)
		}
	}
	return n, err
}

// Close discards the connection unless the body was read to its end: what
// is left of it could be any length.
func (b *body) Close() error {
	if b.state.Swap(bodyClosed) == bodyOpen {
		b.finish(false)
	}
	return nil
}

// finish ends the body's use of the connection: back to the pool if the
// body ended cleanly and nothing else stands in the way, else closed.
func (b *body) finish(ended bool) {
	b.c.Release(b.stop() && ended && b.keep)
}
