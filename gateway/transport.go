package gateway

import (
	"bufio"
	"context"
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
)

// directTransport sends plain HTTP/1.1 requests to one upstream on the
// calling goroutine: it writes the request and reads the response headers
// itself, over a pool of keep-alive connections, where http.Transport hands
// each request to a writer goroutine and takes the response from a reader
// goroutine (two goroutine switches each way, a measurable part of the
// proxy's CPU on a small machine). It uses net/http's own Request.Write and
// ReadResponse, so what goes on the wire is what http.Transport would send.
//
// Everything else goes to the fallback transport unchanged: another
// scheme or host, protocol upgrades (WebSocket), "Expect: 100-continue",
// bodies of unknown length or over 32 KiB, and every request when the
// fallback would send it through a proxy.
//
// A connection goes back to the pool when its response body has been read
// to the end; a body closed before its end, a "Connection: close", an error,
// or bytes the upstream sent beyond the response discard it. Requests are
// retried once, on a new connection, only when nothing of a response came
// back on a pooled connection (the upstream closed it while idle) and the
// request is idempotent and has no body. Every pooled connection is checked
// before it is reused (see get).
type directTransport struct {
	fallback    http.RoundTripper
	host        string // the upstream URL's host, as requests carry it
	addr        string // host:port to dial
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration
	maxHeader   int64         // bytes of response headers, 1xx included
	respHeader  time.Duration // bound on the wait for a response head; 0: none

	mu     sync.Mutex
	idle   []*directConn // most recently used last
	closed bool
}

// newDirectTransport returns the direct transport to target, or nil when
// target is not a plain-HTTP URL it can serve (the caller then uses tr).
// It takes its settings from tr, and hands tr what it does not serve.
func newDirectTransport(target *url.URL, tr *http.Transport) *directTransport {
	if target.Scheme != "http" || target.Host == "" {
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
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t := &directTransport{
		fallback:    tr,
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
	return t
}

// serves reports whether req goes on the direct path.
func (t *directTransport) serves(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host != t.host {
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
	// upstream that answers early (413, 401) and neither reads the rest nor
	// closes would leave a large body's write blocked, so bodies that may
	// not fit in the sockets' buffers go to http.Transport, which reads the
	// answer while it writes.
	if req.ContentLength < 0 || req.ContentLength > directMaxBody {
		return req.Body == nil || req.Body == http.NoBody
	}
	return true
}

// directMaxBody is the largest request body the direct path sends, well
// under what a connection's send and receive buffers hold.
const directMaxBody = 32 << 10

// RoundTrip implements http.RoundTripper.
func (t *directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.serves(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	retry := mayRetry(req)
	for attempt := 0; ; attempt++ {
		c, err := t.get(ctx, attempt == 0)
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
		if attempt == 0 && retry && c.reused && c.got == 0 && ctx.Err() == nil {
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
func (t *directTransport) CloseIdleConnections() {
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

// get returns a pooled connection (if pooled is true and one is there) or
// a new one. A pooled connection is first checked with a non-blocking peek
// at the socket: one the upstream closed, or wrote to while no request was
// outstanding (a stray response, a late body, a 408 before closing), is
// closed, never read as the next request's answer.
func (t *directTransport) get(ctx context.Context, pooled bool) (*directConn, error) {
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
			return c, nil
		}
	}
	nc, err := t.dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	c := &directConn{t: t, nc: nc, peek: newPeeker(nc)}
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(nc, 4<<10)
	return c, nil
}

// put returns c to the pool, or closes it when the pool is full. The
// oldest connection goes when it has been idle too long.
func (t *directTransport) put(c *directConn) {
	c.idleAt = time.Now()
	c.reused = false
	var stale *directConn
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

// directConn is one connection to the upstream. It is the source of its
// own buffered reader, so that it can bound the response headers and count
// what arrived.
type directConn struct {
	t      *directTransport
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	limit  int64 // bytes the reader may still take (the header bound)
	got    int64 // bytes read since the request was written
	reused bool
	grown  bool    // the fast path replaced br with a larger reader
	peek   *peeker // checks the connection before it is reused
	idleAt time.Time

	mu        sync.Mutex // orders the deadline changes of cancel and roundTrip
	cancelled bool
}

var errHeaderTooLarge = errors.New("upstream response headers too large")

func (c *directConn) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.nc.Read(p)
	c.limit -= int64(n)
	c.got += int64(n)
	return n, err
}

// cancel interrupts the connection's I/O: the request's context is done.
func (c *directConn) cancel() {
	c.mu.Lock()
	c.cancelled = true
	c.mu.Unlock()
	c.nc.SetDeadline(time.Unix(1, 0))
}

// roundTrip sends req and reads its response headers. On error it closes
// the connection.
func (c *directConn) roundTrip(req *http.Request) (*http.Response, error) {
	c.got = 0
	c.limit = c.t.maxHeader
	stop := context.AfterFunc(req.Context(), c.cancel)
	hasBody := req.Body != nil && req.Body != http.NoBody
	err := req.Write(c.bw) // closes req.Body
	if err == nil {
		err = c.bw.Flush()
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
		c.setReadDeadline(time.Now().Add(50 * time.Millisecond))
		keep = false
	} else if d := c.t.respHeader; d > 0 {
		c.setReadDeadline(time.Now().Add(d))
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
		c.setReadDeadline(time.Time{})
	}
	c.limit = math.MaxInt64
	keep = keep && !resp.Close && !req.Close
	b := &directBody{c: c, rc: resp.Body, stop: stop, keep: keep}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

func (c *directConn) setReadDeadline(t time.Time) {
	c.mu.Lock()
	if !c.cancelled {
		c.nc.SetReadDeadline(t)
	}
	c.mu.Unlock()
}

// readResponse reads the final response, passing informational (1xx)
// responses to the request's trace, as http.Transport does.
func (c *directConn) readResponse(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	for {
		resp, err := http.ReadResponse(c.br, req)
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

// directBody is a response body on the direct path: at its end it hands
// the connection back to the pool.
type directBody struct {
	c     *directConn
	rc    io.ReadCloser // net/http's body reader over c.br
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

func (b *directBody) Read(p []byte) (int, error) {
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
func (b *directBody) Close() error {
	if b.state.Swap(bodyClosed) == bodyOpen {
		b.finish(false)
	}
	return nil
}

// finish ends the body's use of the connection: back to the pool if the
// body ended cleanly and nothing else stands in the way, else closed.
func (b *directBody) finish(ended bool) {
	c := b.c
	if b.stop() && ended && b.keep && c.br.Buffered() == 0 {
		c.t.put(c)
		return
	}
	c.nc.Close()
}
