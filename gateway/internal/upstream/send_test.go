package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
)

// send writes a GET for path on c with Send, and reads the answer's head.
func send(c *Conn, head string) ([]byte, error) {
	c.BoundHead()
	c.W.WriteString(head)
	if err := c.Send(); err != nil {
		return nil, err
	}
	return c.PeekHead()
}

// A pooled connection that passed the peek at reuse, and that the upstream
// closes before the request goes out, fails as stale: nothing came back,
// so only a request safe to repeat is sent again. The upstream counts one
// request, not two.
func TestSendOnConnectionClosedAfterPeek(t *testing.T) {
	var requests atomic.Int64
	closeIt, closed := make(chan struct{}), make(chan struct{})
	u := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		requests.Add(1)
		io.WriteString(c, h1test.OKResponse)
		<-closeIt
		c.Close()
		close(closed)
	})
	dt, _ := newDirect(t, u)
	roundTrip(t, dt, "GET", u, nil) // pools the connection
	c, err := dt.Get(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !c.reused || c.x == nil {
		t.Fatalf("reused %v, exchange %v: want the pooled plain TCP connection", c.reused, c.x)
	}
	close(closeIt)
	<-closed
	if _, err := send(c, "GET / HTTP/1.1\r\nHost: up\r\n\r\n"); err == nil {
		t.Fatal("a request on a connection the upstream closed got an answer")
	}
	c.Close()
	if !c.Stale() {
		t.Error("not stale: the request would not be retried")
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the upstream counted %d requests, want 1", n)
	}
}

// A request larger than the sockets' buffers is sent whole: the part the
// socket does not take at once is written as any write is.
func TestSendLargerThanSocketBuffers(t *testing.T) {
	const size = 1 << 20
	u := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			n, _ := io.Copy(io.Discard, req.Body)
			body := strconv.FormatInt(n, 10)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	dt, _ := newDirect(t, u)
	c, err := dt.Get(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.nc.(*net.TCPConn).SetWriteBuffer(16 << 10)
	c.W = bufio.NewWriterSize(connWriter{c}, 2*size) // the whole request is Send's
	head := "POST / HTTP/1.1\r\nHost: up\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n" + strings.Repeat("x", size)
	b, err := send(c, head)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.R, nil)
	if err != nil {
		t.Fatalf("%v after head %q", err, b)
	}
	got, _ := io.ReadAll(resp.Body)
	if string(got) != strconv.Itoa(size) {
		t.Errorf("the upstream read %s bytes of the body, want %d", got, size)
	}
}

// Cancel ends the wait for the answer of a request sent with Send.
func TestSendCancel(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	u := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		close(arrived)
		<-release
	})
	dt, _ := newDirect(t, u)
	c, err := dt.Get(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		<-arrived
		c.Cancel()
	}()
	if _, err := send(c, "GET / HTTP/1.1\r\nHost: up\r\n\r\n"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("err %v, want the deadline's", err)
	}
}

// WriteRead whose read deadline passed before it began still writes: a
// response owed to a client that is shut down while idle reaches it.
func TestWriteReadAfterDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- string(b)
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Unix(1, 0))
	if _, err := NewExchange(nc, rc).WriteRead([]byte("owed"), make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("err %v, want the deadline's", err)
	}
	nc.Close()
	if s := <-got; s != "owed" {
		t.Errorf("the peer read %q, want %q", s, "owed")
	}
}
