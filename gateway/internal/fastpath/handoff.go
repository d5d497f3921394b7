package fastpath

import (
	"bufio"
	"bytes"
	"net"
	"sync"
	"time"
)

// handoffListener is the net/http server's listener: the connections the
// fast path hands it.
type handoffListener struct {
	addr net.Addr
	c    chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, c: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to the server, or closes it once the server has stopped;
// either way c is no longer the fast path's to close (true).
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.c <- c:
		return true
	case <-l.done:
		c.Close()
		return true
	}
}

// bufferedConn is a connection whose first bytes are in r's buffer. Its
// first read deadline (net/http's header timeout for the request the fast
// path began to read) is no later than headDeadline, so that a client
// cannot get a second header timeout by forcing the hand-off.
type bufferedConn struct {
	net.Conn
	r            *bufio.Reader
	headDeadline time.Time
}

// NetConn is the connection under c (a *tls.Conn over TLS, whose state
// the gateway gives the requests net/http reads from c).
func (c *bufferedConn) NetConn() net.Conn { return c.Conn }

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *bufferedConn) SetReadDeadline(t time.Time) error {
	if d := c.headDeadline; !d.IsZero() {
		if t.IsZero() || t.After(d) {
			t = d
		}
		c.headDeadline = time.Time{}
	}
	return c.Conn.SetReadDeadline(t)
}

// handOffH2 gives a connection that agreed on h2 by ALPN to the HTTP/2
// server, H2 or net/http's.
func (c *conn) handOffH2(tc net.Conn) bool {
	if c.f.OnHandOff != nil {
		c.f.OnHandOff()
	}
	if c.f.H2 != nil {
		c.f.H2.ServeConn(tc, nil)
		return true
	}
	return c.f.handoff.give(tc)
}

// giveH2C gives a connection that began with the h2c preface to H2, when
// it serves h2c, and reports whether it did.
func (c *conn) giveH2C() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	if c.f.H2 == nil || !c.f.H2C || !bytes.HasPrefix(b, []byte("PRI * HTTP/2.0\r\n")) {
		return false
	}
	c.f.H2.ServeConn(c.nc, c.br)
	return true
}
