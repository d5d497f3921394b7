package fastpath

import (
	"net"
	"syscall"

	"github.com/ratekeeper/ratekeeper/gateway/internal/upstream"
)

// socket is a client connection's socket as the fast path writes it: the
// end of a response can wait for the read of the next request, and go out
// with it (upstream.Exchange). The wait for that request then follows the
// write at once, with no read that finds nothing first. Held bytes go out
// before anything else is written, read or closed, so their order is kept
// under TLS too. One goroutine at a time holds bytes (the connection's).
type socket struct {
	net.Conn
	raw     syscall.RawConn
	x       *upstream.Exchange
	deferW  bool   // Write holds what it is given
	pending []byte // held, for the next read
}

// newSocket wraps nc, or returns nil when it is not a socket. A
// syscall.Conn that wraps a socket passes its bytes on unchanged (the
// gateway's cappedConn).
func newSocket(nc net.Conn) *socket {
	if s, ok := nc.(*socket); ok {
		return s
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return &socket{Conn: nc, raw: rc, x: upstream.NewExchange(nc, rc)}
}

// Sockets returns ln with each connection it accepts wrapped as a socket.
// Under TLS (tls.NewListener over it), that is how the fast path reaches
// the socket below the records.
func Sockets(ln net.Listener) net.Listener { return socketListener{ln} }

type socketListener struct{ net.Listener }

func (l socketListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if s := newSocket(nc); s != nil {
		return s, nil
	}
	return nc, nil
}

func (s *socket) Write(p []byte) (int, error) {
	if s.deferW {
		s.pending = append(s.pending, p...) // TLS reuses p
		return len(p), nil
	}
	if err := s.flush(); err != nil {
		return 0, err
	}
	return s.Conn.Write(p)
}

func (s *socket) Read(p []byte) (int, error) {
	if len(s.pending) == 0 {
		return s.Conn.Read(p)
	}
	out := s.pending
	s.pending = s.pending[:0]
	return s.x.WriteRead(out, p)
}

func (s *socket) Close() error {
	s.flush()
	return s.Conn.Close()
}

// flush writes the held bytes, if any.
func (s *socket) flush() error {
	if len(s.pending) == 0 {
		return nil
	}
	out := s.pending
	s.pending = s.pending[:0]
	_, err := s.Conn.Write(out)
	return err
}

// SyscallConn reaches the socket (clientLeft peeks at it).
func (s *socket) SyscallConn() (syscall.RawConn, error) { return s.raw, nil }
