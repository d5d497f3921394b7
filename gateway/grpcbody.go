package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// grpcBody is the body of a gRPC call that streams to an upstream
// speaking gRPC. A read that waits for the first whole message, or for
// the rest of a message begun, must complete within timeout, as any
// body's read must: a client never pauses inside a message of its own
// accord. A read at a boundary between later messages may wait as long as
// the call lives (a bidirectional stream idles between its messages).
// The deadline is lifted between reads, so that a pause of the
// upstream's (flow control) is not counted against the client.
type grpcBody struct {
	rc      *http.ResponseController
	r       io.ReadCloser
	timeout time.Duration

	// The framing so far, touched by the reader alone: 5 bytes of
	// prefix (a flag and a big-endian length), then the message.
	whole  bool    // a message has been read whole
	prefix [5]byte // the current message's prefix
	got    int     // bytes of prefix read
	left   uint32  // bytes of the current message still to come

	stalled atomic.Bool // a read passed its deadline
}

func (b *grpcBody) Read(p []byte) (int, error) {
	bounded := !b.whole || b.got > 0 || b.left > 0
	if bounded {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
	n, err := b.r.Read(p)
	b.frame(p[:n])
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.stalled.Store(true) // the deadline stays passed, as timedBody's
	case bounded:
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
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

// withGRPCBody is r with its body bounded as grpcBody says.
func withGRPCBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) *http.Request {
	b := &grpcBody{rc: http.NewResponseController(w), r: r.Body, timeout: timeout}
	r = r.WithContext(context.WithValue(r.Context(), grpcBodyKey{}, b))
	r.Body = b
	return r
}

type grpcBodyKey struct{}

// bodyStalled reports whether the body of r (or of a request made from
// it: the proxy's outgoing one) was cut by its deadline as it streamed.
func bodyStalled(r *http.Request) bool {
	b, ok := r.Context().Value(grpcBodyKey{}).(*grpcBody)
	return ok && b.stalled.Load()
}
