package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

// TestTimedBodyStallThenClose: a body read that times out leaves the
// connection's deadline passed, so that closing the body (net/http then
// drains the rest for keep-alive) returns at once instead of waiting on a
// client that stalls. Clearing the deadline on every error made the close
// wait until the client left, holding the upstream request meanwhile (seen
// with Go 1.25's ReverseProxy, which closes the request body after a
// failed write).
func TestTimedBodyStallThenClose(t *testing.T) {
	type result struct {
		readErr error
		close   time.Duration
	}
	got := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := &timedBody{rc: http.NewResponseController(w), r: r.Body, timeout: 100 * time.Millisecond}
		_, err := io.ReadAll(b)
		start := time.Now()
		b.Close()
		got <- result{err, time.Since(start)}
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
	select {
	case res := <-got:
		if !errors.Is(res.readErr, os.ErrDeadlineExceeded) {
			t.Errorf("the read: %v, want the deadline", res.readErr)
		}
		if res.close > time.Second {
			t.Errorf("Close took %v with the client stalled", res.close)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked on the stalled client")
	}
}
