package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// streamGRPC serves a gRPC call to an upstream that speaks gRPC: its body
// streams as it comes, bounded by grpcBody, and the answer's writes count
// as the call's activity.
func (g *Gateway) streamGRPC(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		next.ServeHTTP(w, r)
		return
	}
	b := &grpcBody{r: r.Body, timeout: g.settings.bodyTimeout, idle: g.settings.grpcIdle, start: time.Now(), rc: http.NewResponseController(w)}
	defer b.finish()
	r = r.WithContext(context.WithValue(r.Context(), grpcBodyKey{}, b))
	r.Body = b
	next.ServeHTTP(activeWriter{w, b}, r)
}

// grpcBody is the body of a gRPC call streaming to the upstream. A read
// that waits for the first whole message, or for the rest of a message
// begun, must complete within timeout, as any body's read must. A client
// never pauses inside a message of its own accord. A read at a boundary
// between later messages may wait until nothing has flowed either way for
// idle (a bidirectional stream rests there). Deadlines are lifted between
// reads: a pause of the upstream's (flow control) is not the client's.
//
// A read may outlive the handler (the proxy's transport reads on its own
// goroutine); once finish is called, the stream's deadlines are never
// touched again.
type grpcBody struct {
	r       io.ReadCloser
	timeout time.Duration
	idle    time.Duration
	start   time.Time

	// The framing so far, touched by the reader alone: 5 bytes of
	// prefix (a flag and a big-endian length), then the message.
	whole  bool    // a message has been read whole
	prefix [5]byte // the current message's prefix
	got    int     // bytes of prefix read
	left   uint32  // bytes of the current message still to come

	last    atomic.Int64 // when a byte last flowed either way, since start
	stalled atomic.Bool  // a read passed its deadline

	mu      sync.Mutex
	rc      *http.ResponseController // nil once the handler has returned
	waiting bool                     // a read waits at a boundary
	timer   *time.Timer              // the idle watch
}

func (b *grpcBody) Read(p []byte) (int, error) {
	boundary := b.whole && b.got == 0 && b.left == 0
	b.arm(boundary)
	n, err := b.r.Read(p)
	if n > 0 {
		b.touch()
	}
	b.frame(p[:n])
	b.disarm(boundary, err)
	return n, err
}

// arm bounds the read to come: by timeout, or at a boundary by the idle
// watch.
func (b *grpcBody) arm(boundary bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.rc == nil:
	case !boundary:
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	case b.timer == nil:
		b.touch()
		b.waiting, b.timer = true, time.AfterFunc(b.idle, b.onIdle)
	default:
		b.touch()
		b.waiting = true
		b.timer.Reset(b.idle)
	}
}

// disarm lifts the bound once the read returned err. A deadline that
// passed stays passed, as timedBody's does.
func (b *grpcBody) disarm(boundary bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting = false
	if b.timer != nil {
		b.timer.Stop()
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.stalled.Store(true)
	case !boundary && b.rc != nil:
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// onIdle ends the read waiting at a boundary if nothing has flowed either
// way for idle, and watches on otherwise.
func (b *grpcBody) onIdle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.waiting || b.rc == nil {
		return
	}
	if d := b.idle - (time.Since(b.start) - time.Duration(b.last.Load())); d > 0 {
		b.timer.Reset(d)
		return
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(-time.Second)) // the read fails at once
}

// touch notes that bytes flowed.
func (b *grpcBody) touch() { b.last.Store(int64(time.Since(b.start))) }

// finish is called as the handler returns: the stream is not to be
// touched after.
func (b *grpcBody) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rc, b.waiting = nil, false
	if b.timer != nil {
		b.timer.Stop()
	}
}

// frame follows the message framing over p.
func (b *grpcBody) frame(p []byte) {
	for len(p) > 0 {
		if b.left > 0 {
			k := uint32(min(len(p), int(min(b.left, 1<<30))))
			b.left -= k
			p = p[k:]
		} else {
			k := copy(b.prefix[b.got:], p)
			b.got += k
			p = p[k:]
			if b.got < len(b.prefix) {
				return
			}
			b.got, b.left = 0, binary.BigEndian.Uint32(b.prefix[1:])
		}
		if b.got == 0 && b.left == 0 {
			b.whole = true
		}
	}
}

func (b *grpcBody) Close() error { return b.r.Close() }

type grpcBodyKey struct{}

// bodyStalled reports whether the body of r (or of a request made from
// it: the proxy's outgoing one) was cut by its deadline as it streamed.
func bodyStalled(r *http.Request) bool {
	b, ok := r.Context().Value(grpcBodyKey{}).(*grpcBody)
	return ok && b.stalled.Load()
}

// activeWriter is a gRPC call's ResponseWriter: what it writes is the
// call's activity.
type activeWriter struct {
	http.ResponseWriter
	b *grpcBody
}

func (w activeWriter) Write(p []byte) (int, error) {
	w.b.touch()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets the proxy reach the connection's Flush.
func (w activeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
