package h2

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ratekeeper/ratekeeper/gateway/internal/upstream"
)

// stream is one request and its response.
type stream struct {
	c  *conn
	id uint32

	// The request's head, as the client sent it.
	method, scheme, authority, path, protocol string
	fields                                    []hpack.HeaderField // the regular fields
	truncated                                 bool                // over the header-list size
	bodyless                                  bool                // END_STREAM came with the head

	// Under c.mu.
	send       int64 // the client's window for this stream
	recv       int64 // what the client may still send on it
	recvDecl   int64 // the body's declared length; -1: none
	recvGot    int64 // body bytes received
	recvUnsent int64 // credit read but not yet given back
	remoteEnd  bool  // the client's side is closed
	answered   bool  // the response's END_STREAM is written
	cancel     context.CancelFunc

	wake chan struct{}                 // told of more window, and of the stream's end; made under c.mu by the first wait
	gone atomic.Bool                   // reset, by either side, or the connection ended
	up   atomic.Pointer[upstream.Conn] // the upstream connection its request is on
	body *pipe                         // the request body, for Handler's streams
}

// wakeUp tells st's writer, if it waits for window, to look again; c.mu
// is held.
func (st *stream) wakeUp() {
	if st.wake == nil {
		return // it never waited
	}
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.mu.Unlock()
		return c.onTrailers(st, f)
	}
	if id <= c.maxID {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.maxID = id
	switch {
	case c.goingAway:
		c.mu.Unlock()
		return nil // past the GOAWAY's last stream: not served
	case c.open+1 > maxStreams:
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	case c.working >= maxWork:
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	st := &stream{
		c: c, id: id, fields: f.RegularFields(), truncated: f.Truncated, bodyless: f.StreamEnded(),
		method: f.PseudoValue("method"), scheme: f.PseudoValue("scheme"), authority: f.PseudoValue("authority"),
		path: f.PseudoValue("path"), protocol: f.PseudoValue("protocol"),
		send: c.sendInit, recv: recvWindow, recvDecl: -1, remoteEnd: f.StreamEnded(),
	}
	if err := st.checkPseudo(); err != nil {
		c.mu.Unlock()
		return err
	}
	if !st.bodyless {
		st.body = newPipe()
		for _, hf := range st.fields {
			if hf.Name == "content-length" {
				if n, err := strconv.ParseUint(hf.Value, 10, 63); err == nil {
					st.recvDecl = int64(n)
				} else {
					st.recvDecl = 0
				}
				break
			}
		}
	}
	c.streams[id] = st
	c.open++
	if c.open == 1 {
		c.setIdleDeadlineLocked()
	}
	c.working++
	c.dispatchLocked(st)
	c.mu.Unlock()
	return nil
}

// checkPseudo refuses a request without the pseudo-header fields
// net/http's server requires (RFC 9113, 8.3.1), or with :protocol.
func (st *stream) checkPseudo() error {
	bad := http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	if st.protocol != "" {
		return bad // extended CONNECT, which net/http's server does not take
	}
	if strings.IndexByte(st.authority, '@') >= 0 && (st.scheme == "http" || st.scheme == "https") {
		return bad // userinfo (RFC 9113, 8.3.1)
	}
	if st.method == "CONNECT" {
		if st.protocol == "" && (st.path != "" || st.scheme != "" || st.authority == "") {
			return bad
		}
		return nil
	}
	if st.method == "" || st.path == "" || st.scheme != "https" && st.scheme != "http" {
		return bad
	}
	return nil
}

// onTrailers takes a HEADERS frame on an open stream: the request's
// trailers, which end its body.
func (c *conn) onTrailers(st *stream, f *http2.MetaHeadersFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.remoteEnd {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeStreamClosed}
	}
	if !f.StreamEnded() || f.Truncated {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	st.endBodyLocked()
	return nil
}

// endBodyLocked ends the request body: at its declared length, or short.
func (st *stream) endBodyLocked() {
	st.remoteEnd = true
	if st.body == nil {
		return
	}
	if st.recvDecl != -1 && st.recvDecl != st.recvGot {
		st.body.closeWithError(fmt.Errorf("request declared a Content-Length of %d but only wrote %d bytes", st.recvDecl, st.recvGot))
		return
	}
	st.body.closeWithError(io.EOF)
}

func (c *conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == 0 || id > c.maxID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	n := int64(f.Length)
	if n > c.recvConn {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	st := c.streams[id]
	if st == nil || st.remoteEnd || st.body == nil {
		// Closed: its bytes still count against the connection's window,
		// which gets them back at once.
		c.recvConn -= n
		c.creditLocked(nil, n)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	data := f.Data()
	if st.recvDecl != -1 && st.recvGot+int64(len(data)) > st.recvDecl {
		c.recvConn -= n
		c.creditLocked(nil, n)
		st.body.closeWithError(fmt.Errorf("sender tried to send more than declared Content-Length of %d bytes", st.recvDecl))
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if n > st.recv {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	c.recvConn -= n
	st.recv -= n
	st.recvGot += int64(len(data))
	if len(data) > 0 && !st.body.write(data) {
		c.creditLocked(nil, int64(len(data))) // its reader is gone: dropped
	}
	if pad := n - int64(len(data)); pad > 0 {
		c.creditLocked(st, pad) // the padding, never read
	}
	if f.StreamEnded() {
		st.endBodyLocked()
	}
	return nil
}

// creditLocked gives n bytes the client sent back to its windows: the
// connection's, and st's when not nil. Credit goes back in quarters of the
// window, so that most reads send no WINDOW_UPDATE, and a client always
// has three quarters to send in. c.mu is held; the frames are written
// unflushed.
func (c *conn) creditLocked(st *stream, n int64) {
	c.recvUnsent += n
	var conn, strm int64
	if c.recvUnsent >= giveBackAt {
		conn, c.recvUnsent = c.recvUnsent, 0
		c.recvConn += conn
	}
	if st != nil && !st.remoteEnd {
		st.recvUnsent += n
		if st.recvUnsent >= giveBackAt {
			strm, st.recvUnsent = st.recvUnsent, 0
			st.recv += strm
		}
	}
	if conn == 0 && strm == 0 {
		return
	}
	c.writeFrames(func() error {
		if conn > 0 {
			if err := c.fw.WriteWindowUpdate(0, uint32(conn)); err != nil {
				return err
			}
		}
		if strm > 0 {
			return c.fw.WriteWindowUpdate(st.id, uint32(strm))
		}
		return nil
	})
}
