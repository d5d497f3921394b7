//go:build unix

package upstream

import (
	"crypto/tls"
	"net"
	"syscall"
)

// peeker checks whether an idle connection is still clean: a non-blocking
// peek at its socket finds nothing to read. A closed one reads end of
// file, and one the upstream wrote to unasked cannot be trusted with a
// response either. It keeps what it needs, so a check allocates nothing.
//
// Over TLS the socket holds records, and crypto/tls may have read some of
// them from the socket already. So a read of the TLS connection that must
// return at once (readTLS) takes what it holds first. Then the socket is
// peeked as for clear text.
type peeker struct {
	tls   *tls.Conn
	rc    syscall.RawConn
	clean bool
	buf   [1]byte
	fn    func(fd uintptr) bool
}

func newPeeker(nc net.Conn) *peeker {
	p := &peeker{}
	if tc, ok := nc.(*tls.Conn); ok {
		p.tls = tc
		nc = tc.NetConn()
	}
	if sc, ok := nc.(syscall.Conn); ok {
		p.rc, _ = sc.SyscallConn()
	}
	p.fn = func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		p.clean = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait
	}
	return p
}

// alive reports whether the connection is open with nothing unread.
func (p *peeker) alive() bool {
	if p.tls != nil && !readTLS(p.tls, p.buf[:]) {
		return false
	}
	if p.rc == nil {
		return true
	}
	p.clean = false
	return p.rc.Read(p.fn) == nil && p.clean
}
