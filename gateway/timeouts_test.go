package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
)

// waitClosed reads from nc until the gateway closes it, within limit.
func waitClosed(t *testing.T, nc net.Conn, limit time.Duration) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(limit))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the gateway held the connection over %v", limit)
		}
	}
}

// A connection that sends nothing is closed after the header
// timeout on every client path, and one address holds at most
// max_conns_per_ip connections, trusted proxies aside.
func TestIdleConnectionsAreBounded(t *testing.T) {
	for _, client := range []string{"fast", "standard"} {
		t.Run(client, func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startGateway(t, client, up.URL, defaultRules+"client: {read_header_timeout: 300ms, max_conns_per_ip: 3}\n")
			start := time.Now()
			silent, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			waitClosed(t, silent, 5*time.Second)
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Errorf("closed after %v, before the header timeout", d)
			}

			// The cap: three connections stay, a fourth is closed at once.
			var held []net.Conn
			for range 3 {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				held = append(held, nc)
				io.WriteString(nc, "GET /x HTTP/1.1\r\nHost: gw.test\r\n\r\n")
				if _, err := http.ReadResponse(bufio.NewReader(nc), nil); err != nil {
					t.Fatalf("a connection within the cap: %v", err)
				}
			}
			fourth, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer fourth.Close()
			io.WriteString(fourth, "GET /x HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			fourth.SetReadDeadline(time.Now().Add(5 * time.Second))
			// Closed unread: a reset, or end of file.
			if b, err := io.ReadAll(fourth); len(b) > 0 || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("a fourth connection: read %q, %v; want it closed unanswered", b, err)
			}
			// A place freed is taken again (once the gateway has seen the
			// close).
			held[0].Close()
			deadline := time.Now().Add(5 * time.Second)
			for {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				io.WriteString(nc, "GET /x HTTP/1.1\r\nHost: gw.test\r\n\r\n")
				nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = http.ReadResponse(bufio.NewReader(nc), nil)
				nc.Close()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a freed place was never given again")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	// Trusted proxies are exempt: a load balancer holds every connection.
	up := newRecUpstream(t, nil)
	addr := startGateway(t, "fast", up.URL, defaultRules+"client: {max_conns_per_ip: 1}\nclient_ip: {trusted_proxies: [127.0.0.1]}\n")
	for range 3 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		io.WriteString(nc, "GET /x HTTP/1.1\r\nHost: gw.test\r\n\r\n")
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := http.ReadResponse(bufio.NewReader(nc), nil); err != nil {
			t.Fatalf("a trusted proxy's connection was refused: %v", err)
		}
	}
}

// A client that sends its body slowly holds no upstream
// connection, and times out; an upstream that does not answer times out;
// a client that leaves cancels its upstream request.
func TestSlowClientsAndUpstreams(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			var reached atomic.Int64
			cancelled := make(chan string, 8)
			up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached.Add(1)
				if r.URL.Path == "/hang" {
					<-r.Context().Done() // until the gateway gives the request up
					cancelled <- r.URL.Path
					return
				}
				io.Copy(io.Discard, r.Body)
				io.WriteString(w, "ok")
			}))
			addr := startVia(t, tr, up.URL, defaultRules+"client: {body_timeout: 300ms, read_header_timeout: 1s}\nupstream_timeouts: {response_header: 500ms}\n")

			// A body that stops halfway: 408, or the connection closed (the
			// fast path reads a small body with the head, under the header
			// timeout); the upstream never hears of it.
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			io.WriteString(nc, "POST /slow HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 10\r\n\r\nhalf.")
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
			switch {
			case err == nil && resp.StatusCode != http.StatusRequestTimeout:
				t.Errorf("a body that stopped: %s, want 408", resp.Status)
			case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
				t.Error("a body that stopped: the gateway waited for it over 5s")
			}
			if n := reached.Load(); n != 0 {
				t.Errorf("the upstream saw %d requests of a body that never came", n)
			}

			// An upstream that does not answer: 502 after response_header.
			start := time.Now()
			resp, body := rawExchange(t, addr, "GET /hang HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			if resp.StatusCode != http.StatusBadGateway && resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("an upstream that never answers: %s %q", resp.Status, body)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("an upstream that never answers took %v", d)
			}
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream request that timed out was never cancelled")
			}

			// A client that leaves while the upstream works: the upstream
			// request is cancelled, long before response_header.
			addr2 := startVia(t, tr, up.URL, defaultRules+"upstream_timeouts: {response_header: 1m}\n")
			nc2, err := net.Dial("tcp", addr2)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(nc2, "GET /hang HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			deadline := time.Now().Add(5 * time.Second)
			for reached.Load() < 2 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond) // until the upstream has the request
			}
			nc2.Close()
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Fatal("a request whose client left still holds its upstream connection")
			}
		})
	}
}

// A body larger than body_buffer streams, and a
// pause longer than body_timeout ends the request and frees the upstream
// connection.
func TestSlowLargeBodyFreesUpstream(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			ended := make(chan error, 1)
			up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := io.Copy(io.Discard, r.Body)
				ended <- err
			}))
			addr := startVia(t, tr, up.URL, defaultRules+"client: {body_timeout: 300ms, body_buffer: 16}\n")
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			// Larger than the fast path takes: it streams on every path.
			io.WriteString(nc, "POST /big HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 10000\r\n\r\n"+strings.Repeat("b", 5000))
			select {
			case err := <-ended:
				if err == nil {
					t.Error("the upstream read a whole body that was never sent")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a stalled body held its upstream request over 5s")
			}
		})
	}
}
