package h2

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// dispatchLocked queues st for a worker: an idle one, or a new one while
// the connection has fewer than maxStreams. c.mu is held.
func (c *conn) dispatchLocked(st *stream) {
	c.work <- st // never blocks: c.working <= maxWork, the channel's size
	if c.idle > 0 {
		c.idle-- // one of them takes it
		return
	}
	if c.workers < maxStreams {
		c.workers++
		go c.worker()
	}
}

// worker serves the connection's streams until it has waited idleWorker
// for one, or the connection ends (the reader closes c.work). The timer
// is not reset for each stream: when it fires, a worker busy since goes on.
func (c *conn) worker() {
	t := time.NewTimer(idleWorker)
	defer t.Stop()
	busy := false
	for {
		select {
		case st, ok := <-c.work:
			if !ok {
				return
			}
			c.serveStream(st)
			c.mu.Lock()
			c.working--
			c.idle++
			c.mu.Unlock()
			busy = true
		case <-t.C:
			t.Reset(idleWorker)
			if busy {
				busy = false
				continue
			}
			c.mu.Lock()
			if len(c.work) > 0 { // given one as the timer fired
				c.mu.Unlock()
				continue
			}
			c.idle--
			c.workers--
			c.mu.Unlock()
			return
		}
	}
}

// serveStream answers st: relayed when plain, else by the Handler.
func (c *conn) serveStream(st *stream) {
	defer func() {
		if p := recover(); p != nil {
			if c.s.OnPanic != nil {
				c.s.OnPanic(p)
			}
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.s.logger.Error("panic serving an HTTP/2 stream", "remote", c.remote, "panic", fmt.Sprint(p), "stack", string(buf))
			c.resetStream(st.id, http2.ErrCodeInternal)
			c.flush()
		}
	}()
	if st.gone.Load() {
		return // reset, or the connection ended, while it waited
	}
	if c.relay(st) {
		return
	}
	c.serveHandler(st)
}

var errStalled = errors.New("the client's flow-control window stayed closed past the write timeout")

// reserve waits until st may send DATA, and takes up to n bytes of the
// windows. A wait longer than the write timeout resets the stream.
func (st *stream) reserve(n int) (int, error) {
	c := st.c
	var timeout <-chan time.Time
	for {
		c.mu.Lock()
		if st.gone.Load() || c.closed {
			delete(c.waiting, st)
			c.mu.Unlock()
			return 0, errStreamGone
		}
		if w := min(int64(n), c.sendConn, st.send, int64(c.peerFrame)); w > 0 {
			c.sendConn -= w
			st.send -= w
			delete(c.waiting, st)
			c.mu.Unlock()
			return int(w), nil
		}
		if c.waiting == nil {
			c.waiting = map[*stream]struct{}{}
		}
		if st.wake == nil {
			st.wake = make(chan struct{}, 1)
		}
		c.waiting[st] = struct{}{}
		c.mu.Unlock()
		if c.flush() != nil {
			return 0, errStreamGone
		}
		if timeout == nil && c.s.settings.WriteTimeout > 0 {
			t := time.NewTimer(c.s.settings.WriteTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-st.wake:
		case <-timeout:
			c.resetStream(st.id, http2.ErrCodeInternal)
			return 0, errStalled
		case <-c.done:
			return 0, errStreamGone
		}
	}
}

// writeHeaders writes fields as st's header block, in HEADERS and
// CONTINUATION frames of the client's size, unflushed.
func (st *stream) writeHeaders(fields []hpack.HeaderField, end bool) error {
	c := st.c
	c.mu.Lock()
	size := c.peerFrame
	c.mu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if st.gone.Load() {
		return errStreamGone
	}
	c.hbuf.b = c.hbuf.b[:0]
	for _, f := range fields {
		c.enc.WriteField(f)
	}
	block := c.hbuf.b
	first := min(len(block), size)
	err := c.fw.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: block[:first], EndStream: end, EndHeaders: first == len(block)})
	for block = block[first:]; err == nil && len(block) > 0; {
		n := min(len(block), size)
		err = c.fw.WriteContinuation(st.id, n == len(block), block[:n])
		block = block[n:]
	}
	if err != nil {
		c.werr = err
		c.nc.Close()
	}
	return err
}

// writeData writes p as st's DATA, within the client's windows. It is
// left unflushed, but for a wait for window, before which what is written
// is flushed. end ends the stream with the last frame (empty if p is).
func (st *stream) writeData(p []byte, end bool) error {
	c := st.c
	for len(p) > 0 || end {
		n := 0
		if len(p) > 0 {
			var err error
			if n, err = st.reserve(len(p)); err != nil {
				return err
			}
		}
		last := end && n == len(p)
		err := c.writeFrames(func() error {
			if st.gone.Load() {
				return nil
			}
			return c.fw.WriteData(st.id, last, p[:n])
		})
		if err != nil {
			return err
		}
		if st.gone.Load() {
			return errStreamGone
		}
		p = p[n:]
		if last {
			return nil
		}
	}
	return nil
}

// finish ends st once its response's END_STREAM is written: the stream is
// closed, and a client still sending a body is told to stop (RST_STREAM
// NO_ERROR), as x/net's server tells it.
func (st *stream) finish() {
	c := st.c
	c.mu.Lock()
	st.answered = true
	if c.earlyReset > 0 {
		c.earlyReset--
	}
	rst := !st.remoteEnd && c.streams[st.id] == st
	c.closeStreamLocked(st, errStreamGone)
	c.mu.Unlock()
	if rst {
		c.writeFrames(func() error { return c.fw.WriteRSTStream(st.id, http2.ErrCodeNo) })
	}
}

// pipe is a request body on its way from the connection's reader to the
// Handler.
type pipe struct {
	mu       sync.Mutex
	buf      []byte
	err      error // what a read returns once buf is empty
	deadline time.Time
	wake     chan struct{}
}

func newPipe() *pipe { return &pipe{wake: make(chan struct{}, 1)} }

func (p *pipe) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// write adds b to the body, and reports whether it was kept: a body closed
// (its reader gone, or its stream) drops it.
func (p *pipe) write(b []byte) bool {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return false
	}
	p.buf = append(p.buf, b...)
	p.mu.Unlock()
	p.signal()
	return true
}

// closeWithError ends the body: reads return err once it is read.
func (p *pipe) closeWithError(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.signal()
}

// breakWithError ends the body at once: what is buffered is dropped.
func (p *pipe) breakWithError(err error) int {
	p.mu.Lock()
	n := len(p.buf)
	p.buf = nil
	if p.err == nil || p.err == io.EOF {
		p.err = err
	}
	p.mu.Unlock()
	p.signal()
	return n
}

func (p *pipe) setDeadline(t time.Time) {
	p.mu.Lock()
	p.deadline = t
	p.mu.Unlock()
	p.signal()
}

func (p *pipe) read(b []byte) (int, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		p.mu.Lock()
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[:copy(p.buf, p.buf[n:])]
			p.mu.Unlock()
			return n, nil
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return 0, err
		}
		dl := p.deadline
		p.mu.Unlock()
		var expired <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			expired = timer.C
		}
		select {
		case <-p.wake:
		case <-expired:
		}
	}
}
