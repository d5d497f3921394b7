package httplimit

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/rules"
)

// reqBody is the start of a request's body, read for the reserves of
// rules that read it (rules.Cost.ReadsRequest).
type reqBody struct {
	b     []byte
	whole bool // b is the whole body, in clear
}

// readsRequest reports whether one of ms reads its reserve from the
// request's body.
func readsRequest(ms []rules.Match) bool {
	for _, mt := range ms {
		if mt.Rule.Mode != rules.Shadow && mt.Rule.Cost.ReadsRequest() {
			return true
		}
	}
	return false
}

// peekBody reads r's body up to rules.RequestBodyLimit bytes, and puts
// back in r.Body what it read before the rest: the handler reads the same
// bytes. A body declared longer, with a Content-Encoding, or of a gRPC
// call (a stream, which may wait for the answer) is not read.
// A body that fails to read is not whole: its error comes back after the
// bytes read.
func peekBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) reqBody {
	if r.Body == nil || r.Body == http.NoBody {
		return reqBody{whole: true}
	}
	if ce := r.Header.Get("Content-Encoding"); (ce != "" && ce != "identity") || r.ContentLength > rules.RequestBodyLimit || IsGRPC(r) {
		return reqBody{}
	}
	body := io.Reader(r.Body)
	if timeout > 0 && w != nil {
		body = &timedRead{rc: http.NewResponseController(w), r: r.Body, timeout: timeout}
	}
	buf := make([]byte, 0, min(max(r.ContentLength, 0), rules.RequestBodyLimit)+1)
	var err error
	for len(buf) <= rules.RequestBodyLimit && err == nil {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var k int
		k, err = body.Read(buf[len(buf):min(cap(buf), rules.RequestBodyLimit+1)])
		buf = buf[:len(buf)+k]
	}
	whole := errors.Is(err, io.EOF) && len(buf) <= rules.RequestBodyLimit
	if err == nil || errors.Is(err, io.EOF) {
		err = nil
		if timeout > 0 && w != nil {
			// Lifted: the handler bounds its own reads.
			_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		}
	}
	r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), &errReader{r.Body, err}), c: r.Body}
	return reqBody{b: buf, whole: whole}
}

// replayBody is a request body read in part: what was read, then the rest.
type replayBody struct {
	io.Reader
	c io.Closer
}

func (b *replayBody) Close() error { return b.c.Close() }

// errReader reads r, or fails with err when it is not nil: a body's read
// error comes back once the bytes read before it are.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return e.r.Read(p)
}

// timedRead is a body whose every read must complete within timeout. After
// an error the connection's read deadline stays passed: closing the body
// makes net/http drain it, which must not wait on a stalled client.
type timedRead struct {
	rc      *http.ResponseController
	r       io.Reader
	timeout time.Duration
}

func (t *timedRead) Read(p []byte) (int, error) {
	_ = t.rc.SetReadDeadline(time.Now().Add(t.timeout))
	return t.r.Read(p)
}
