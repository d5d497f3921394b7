package h2

import (
	"bufio"
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
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ratekeeper/ratekeeper/gateway/internal/upstream"
	"github.com/ratekeeper/ratekeeper/httplimit"
)

// Settings are the server's bounds on clients and the upstream. The
// gateway fills every field from its file; a zero duration sets no bound.
type Settings struct {
	AllowEncodedSlash     bool          // paths.allow_encoded_slash
	ReadHeaderTimeout     time.Duration // client.read_header_timeout: the preface and first SETTINGS
	IdleTimeout           time.Duration // client.idle_timeout: a connection without streams
	WriteTimeout          time.Duration // client.write_timeout: a write, or a wait for window
	ResponseHeaderTimeout time.Duration // upstream_timeouts.response_header
}

// The bounds of each connection. They are those x/net/http2's server sets
// by default, so that a client sees the same limits on either server.
const (
	maxStreams    = 250     // SETTINGS_MAX_CONCURRENT_STREAMS
	maxReadFrame  = 1 << 20 // SETTINGS_MAX_FRAME_SIZE
	recvWindow    = 1 << 20 // each stream's receive window, and the connection's
	maxHeaderList = 1 << 20 // SETTINGS_MAX_HEADER_LIST_SIZE, as http.DefaultMaxHeaderBytes
	maxSettings   = 100     // settings in one SETTINGS frame
	// maxWork bounds the streams a connection has work for, running or
	// queued, reset or not; past it the client is told to calm down.
	maxWork = 5 * maxStreams
	// maxEarlyResets bounds the streams a client resets before their
	// answer, net of those it lets finish (rapid reset).
	maxEarlyResets = 8 * maxStreams
	// idleWorker is how long a connection's idle worker waits for a stream.
	idleWorker = time.Second
	// writeBuf holds a response's frames until their one flush: a TLS
	// record's worth.
	writeBuf = 16 << 10
	// giveBackAt is the received bytes after which credit is returned.
	giveBackAt = recvWindow / 4
	// goAwayTimeout is how long a connection lingers after a GOAWAY for an
	// error.
	goAwayTimeout = time.Second
	// maxWindow is the largest flow-control window (RFC 9113, 6.9.1).
	maxWindow = 1<<31 - 1
)

// Server serves HTTP/2 client connections that the HTTP/1.1 fast path
// hands it. It relays plain requests over the direct upstream transport:
// those without a body whose request view it builds as the gateway's
// view.go does. Each is decided by the middleware's Admit. Every other
// stream goes to Handler, the gateway's net/http handler.
//
// Each connection has one goroutine that reads frames, and at most
// maxStreams workers that serve streams; a worker writes a response's
// frames into one buffer and flushes them once.
//
// Create a Server with New and set its exported fields before the first
// connection.
type Server struct {
	// Handler serves the streams the server does not relay itself.
	Handler http.Handler
	// HandOffAll, if not nil, is asked before each stream: true gives it
	// to Handler (which logs what the server does not).
	HandOffAll func() bool
	// OnPanic, if not nil, is given a panic a connection recovered.
	OnPanic func(any)
	// HTTPServer is the server a Handler's requests name as theirs
	// (http.ServerContextKey); ReverseProxy then aborts a response the
	// upstream cut short, which resets its stream.
	HTTPServer *http.Server

	mw       *httplimit.Middleware
	up       *upstream.Transport
	upstream string // the upstream URL, redacted, for logs and 502s
	prefix   string // the upstream URL's path, joined before each target
	host     string // the Host the upstream is sent
	logger   *slog.Logger
	settings Settings
	date     atomic.Pointer[cachedDate]
	read     atomic.Pointer[headersRead]

	mu       sync.Mutex
	conns    map[*conn]struct{}
	closing  bool
	inFlight sync.WaitGroup
}

// New returns the server relaying to target over up, deciding with mw,
// or nil when target has a query or an escaped path, which net/http
// merges. handler serves the other streams.
func New(mw *httplimit.Middleware, up *upstream.Transport, target *url.URL, s Settings, logger *slog.Logger, handler http.Handler) *Server {
	if up == nil || target.RawQuery != "" || target.RawPath != "" {
		return nil
	}
	prefix := target.EscapedPath()
	if len(prefix) > 0 && prefix[len(prefix)-1] == '/' {
		prefix = prefix[:len(prefix)-1]
	}
	return &Server{
		Handler:  handler,
		mw:       mw,
		up:       up,
		upstream: target.Redacted(),
		prefix:   prefix,
		host:     target.Host,
		logger:   logger,
		settings: s,
		conns:    map[*conn]struct{}{},
	}
}

// ServeConn serves nc, whose first bytes may be in br (nil: none), on a
// goroutine of its own. nc is the server's to close.
func (s *Server) ServeConn(nc net.Conn, br *bufio.Reader) {
	c := s.newConn(nc, br)
	if c == nil {
		nc.Close()
		return
	}
	go c.serve()
}

// Shutdown tells every connection to go away (GOAWAY) after the streams
// it has, and waits for them until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for c := range s.conns {
		c.goAway(http2.ErrCodeNo)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.inFlight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) newConn(nc net.Conn, br *bufio.Reader) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), done: make(chan struct{})}
	if ap, err := netip.ParseAddrPort(c.remote); err == nil {
		c.peer = ap.Addr().String()
	} else if h, _, err := net.SplitHostPort(c.remote); err == nil {
		c.peer = h
	} else {
		c.peer = c.remote
	}
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		c.tls = &st
	}
	if br == nil {
		br = bufio.NewReaderSize(nc, 16<<10)
	}
	c.ctx = context.WithValue(context.WithValue(contextBackground, http.ServerContextKey, s.HTTPServer), http.LocalAddrContextKey, nc.LocalAddr())
	c.br = br
	c.bw = bufio.NewWriterSize(nc, writeBuf)
	c.fr = http2.NewFramer(nil, br)
	c.fr.SetMaxReadFrameSize(maxReadFrame)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = maxHeaderList
	c.fr.SetReuseFrames()
	c.fw = http2.NewFramer(c.bw, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.streams = map[uint32]*stream{}
	c.sendConn, c.sendInit, c.peerFrame = 65535, 65535, 16384
	c.recvConn = recvWindow
	c.work = make(chan *stream, maxWork)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil
	}
	s.conns[c] = struct{}{}
	s.inFlight.Add(1)
	return c
}

// conn is one client connection.
type conn struct {
	s      *Server
	nc     net.Conn
	br     *bufio.Reader
	fr     *http2.Framer // reads, on the connection's goroutine only
	tls    *tls.ConnectionState
	remote string
	peer   string
	done   chan struct{}   // closed when the connection ends
	ctx    context.Context // the Handler's requests' base

	// The write side, under wmu: frames go into bw, and leave on flush.
	wmu     sync.Mutex
	bw      *bufio.Writer
	fw      *http2.Framer
	enc     *hpack.Encoder
	hbuf    headerBuf
	writeBy time.Time // the write deadline set last
	writing int       // responses being written (beginWrite)
	werr    error     // a write failed: the connection is done

	// The connection's state, under mu.
	mu         sync.Mutex
	streams    map[uint32]*stream // open, or half-closed
	maxID      uint32             // the highest stream the client opened
	open       int                // streams open to the client
	working    int                // streams with a worker's work, reset ones too
	sendConn   int64              // the client's connection window for DATA
	sendInit   int64              // its SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  int                // its SETTINGS_MAX_FRAME_SIZE
	recvConn   int64              // what the client may still send on the connection
	recvUnsent int64              // connection credit not yet given back
	earlyReset int                // early resets, net of streams answered
	waiting    map[*stream]struct{}
	goingAway  bool
	draining   bool // after a GOAWAY for an error: reads wait goAwayTimeout
	closed     bool
	idleSince  time.Time
	workers    int
	idle       int
	work       chan *stream
}

// headerBuf is where HPACK encodes a header block.
type headerBuf struct{ b []byte }

func (h *headerBuf) Write(p []byte) (int, error) { h.b = append(h.b, p...); return len(p), nil }

// The client preface (RFC 9113, 3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

var errStreamGone = errors.New("the stream was reset")

// serve reads frames until the connection ends.
func (c *conn) serve() {
	defer c.close()
	defer c.recoverPanic()
	if d := c.s.settings.ReadHeaderTimeout; d > 0 {
		c.nc.SetReadDeadline(time.Now().Add(d))
	}
	if b, err := c.br.Peek(len(preface)); err != nil || string(b) != preface {
		return
	}
	c.br.Discard(len(preface))
	c.writeFrames(func() error {
		if err := c.fw.WriteSettings(
			http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxReadFrame},
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: maxStreams},
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderList},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow},
		); err != nil {
			return err
		}
		return c.fw.WriteWindowUpdate(0, recvWindow-65535)
	})
	c.mu.Lock()
	c.idleSince = time.Now()
	c.mu.Unlock()
	// The first frame must be SETTINGS, within the header timeout.
	f, err := c.fr.ReadFrame()
	if sf, ok := f.(*http2.SettingsFrame); err != nil || !ok || sf.IsAck() {
		c.connError(http2.ErrCodeProtocol)
		return
	}
	c.setIdleDeadline()
	for {
		if err := c.handle(f); err != nil && !c.frameError(err) {
			return
		}
		if c.br.Buffered() == 0 {
			if c.flush() != nil {
				return
			}
		}
		f, err = c.fr.ReadFrame()
		if err != nil && !c.frameError(err) {
			return
		}
		if err != nil {
			f = nil
		}
	}
}

// frameError answers err, a frame's error, and reports whether the
// connection goes on.
func (c *conn) frameError(err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		c.resetStream(se.StreamID, se.Code)
		return true
	case errors.As(err, &ce):
		c.connError(http2.ErrCode(ce))
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.connError(http2.ErrCodeFrameSize)
	}
	return false
}

// handle acts on one frame.
func (c *conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case nil:
		return nil
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		return c.writeFrames(func() error { return c.fw.WritePing(true, f.Data) })
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.GoAwayFrame:
		c.goAway(http2.ErrCodeNo)
	case *http2.PriorityFrame:
		if f.StreamID == f.StreamDep {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if f.NumSettings() > maxSettings || f.HasDuplicates() {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			c.wmu.Lock()
			c.enc.SetMaxDynamicTableSizeLimit(s.Val)
			c.wmu.Unlock()
		case http2.SettingInitialWindowSize:
			return c.setInitialWindow(int64(s.Val))
		case http2.SettingMaxFrameSize:
			c.mu.Lock()
			c.peerFrame = int(s.Val)
			c.mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.writeFrames(func() error { return c.fw.WriteSettingsAck() })
}

// setInitialWindow moves every stream's window by the change of the
// initial one (RFC 9113, 6.9.2).
func (c *conn) setInitialWindow(v int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delta := v - c.sendInit
	c.sendInit = v
	for _, st := range c.streams {
		st.send += delta
		if st.send > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
	}
	c.wakeAll()
	return nil
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		c.sendConn += inc
		if c.sendConn > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.wakeAll()
		return nil
	}
	if f.StreamID > c.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil
	}
	st.send += inc
	if st.send > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.wakeUp()
	return nil
}

// wakeAll wakes the streams waiting for window; c.mu is held.
func (c *conn) wakeAll() {
	for st := range c.waiting {
		st.wakeUp()
	}
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID > c.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return nil
	}
	if !st.answered {
		c.earlyReset++
		if c.earlyReset > maxEarlyResets {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	}
	c.closeStreamLocked(st, errStreamGone)
	return nil
}

// resetStream sends RST_STREAM for id and forgets the stream.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.closeStreamLocked(st, errStreamGone)
	}
	c.mu.Unlock()
	c.writeFrames(func() error { return c.fw.WriteRSTStream(id, code) })
}

// closeStreamLocked forgets st: its work stops at its next write. c.mu is
// held.
func (c *conn) closeStreamLocked(st *stream, err error) {
	if c.streams[st.id] != st {
		return
	}
	delete(c.streams, st.id)
	st.gone.Store(true)
	st.wakeUp()
	if st.body != nil {
		st.body.closeWithError(err)
	}
	if st.cancel != nil {
		st.cancel()
	}
	// Whoever takes the upstream connection out of st.up disposes of it:
	// here, or the worker when it ends (which then may pool it).
	if u := st.up.Swap(nil); u != nil {
		u.Close()
	}
	c.open--
	if c.open == 0 {
		c.idleSince = time.Now()
		c.setIdleDeadlineLocked()
	}
}

// setIdleDeadline bounds the wait for a stream by the idle timeout, from
// when the last one closed; with streams open, reads wait unbounded.
func (c *conn) setIdleDeadline() {
	c.mu.Lock()
	c.setIdleDeadlineLocked()
	c.mu.Unlock()
}

func (c *conn) setIdleDeadlineLocked() {
	switch {
	case c.draining:
	case c.open > 0:
		c.nc.SetReadDeadline(time.Time{})
	case c.goingAway || c.closed:
		c.nc.SetReadDeadline(time.Unix(1, 0))
	case c.s.settings.IdleTimeout > 0:
		c.nc.SetReadDeadline(c.idleSince.Add(c.s.settings.IdleTimeout))
	default:
		c.nc.SetReadDeadline(time.Time{})
	}
}

// goAway tells the client no stream past those it opened will be served;
// the connection closes once they are done.
func (c *conn) goAway(code http2.ErrCode) {
	c.mu.Lock()
	if c.goingAway {
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	last := c.maxID
	c.setIdleDeadlineLocked()
	c.mu.Unlock()
	c.writeFrames(func() error { return c.fw.WriteGoAway(last, code, nil) })
	c.flush()
}

// connError ends the connection with GOAWAY code. As x/net's server
// does, it reads on, and drops, what the client sends for a second: the
// streams under way may finish, and the GOAWAY is not lost to a TCP reset
// for unread bytes.
func (c *conn) connError(code http2.ErrCode) {
	c.mu.Lock()
	last := c.maxID
	c.goingAway, c.draining = true, true
	c.nc.SetReadDeadline(time.Now().Add(goAwayTimeout))
	c.mu.Unlock()
	c.writeFrames(func() error { return c.fw.WriteGoAway(last, code, nil) })
	if c.flush() == nil {
		io.Copy(io.Discard, c.br)
	}
}

// close ends the connection: every stream's work stops at its next write.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	for _, st := range c.streams {
		c.closeStreamLocked(st, errStreamGone)
	}
	c.mu.Unlock()
	close(c.done)
	close(c.work) // the reader, which alone sends on it, is done
	c.nc.Close()
	s := c.s
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.inFlight.Done()
}

func (c *conn) recoverPanic() {
	if p := recover(); p != nil {
		if c.s.OnPanic != nil {
			c.s.OnPanic(p)
		}
		buf := make([]byte, 64<<10)
		buf = buf[:runtime.Stack(buf, false)]
		c.s.logger.Error("panic serving an HTTP/2 connection", "remote", c.remote, "panic", fmt.Sprint(p), "stack", string(buf))
	}
}

// writeFrames writes frames into the buffer, unflushed.
func (c *conn) writeFrames(write func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if err := write(); err != nil {
		c.werr = err
		c.nc.Close()
	}
	return c.werr
}

// beginWrite marks a response being written: until its endWrite, what is
// written stays in the buffer, or is flushed before its writer waits (for
// the upstream, or for window).
func (c *conn) beginWrite() {
	c.wmu.Lock()
	c.writing++
	c.wmu.Unlock()
}

// endWrite ends a response's writing, and flushes unless another is being
// written, whose end flushes both: responses that end together leave in one
// write, and one TLS record when they fit.
func (c *conn) endWrite() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.writing--
	if c.writing == 0 {
		c.flushLocked()
	}
}

// flush sends what the buffer holds, bounded by the write timeout.
func (c *conn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushLocked()
}

func (c *conn) flushLocked() error {
	if c.werr != nil || c.bw.Buffered() == 0 {
		return c.werr
	}
	if d := c.s.settings.WriteTimeout; d > 0 {
		// Moved only by an eighth of the timeout, as on the fast path.
		if t := time.Now().Add(d); t.Sub(c.writeBy) > d/8 {
			c.nc.SetWriteDeadline(t)
			c.writeBy = t
		}
	}
	if err := c.bw.Flush(); err != nil {
		c.werr = err
		c.nc.Close() // the reader sees it too
	}
	return c.werr
}

// dateValue returns the Date header's value; the text is made once a
// second.
func (s *Server) dateValue() string {
	now := time.Now()
	d := s.date.Load()
	if d == nil || d.sec != now.Unix() {
		d = &cachedDate{sec: now.Unix(), text: now.UTC().Format(http.TimeFormat)}
		s.date.Store(d)
	}
	return d.text
}

type cachedDate struct {
	sec  int64
	text string
}
