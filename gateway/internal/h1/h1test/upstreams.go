package h1test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Upstream is a test upstream that counts the connections it accepted.
type Upstream struct {
	*httptest.Server
	Conns atomic.Int64
}

// NewUpstream starts an Upstream serving h, closed when the test ends.
func NewUpstream(t testing.TB, h http.Handler) *Upstream {
	t.Helper()
	u := &Upstream{Server: httptest.NewUnstartedServer(h)}
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.Conns.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// RawServer accepts connections on a loopback port and hands each to serve
// on its own goroutine, with a reader over it. It returns the server's
// URL. It stops when the test ends, and waits for serve to return.
func RawServer(t testing.TB, serve func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	return "http://" + ln.Addr().String()
}
