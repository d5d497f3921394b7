//go:build unix

package gateway

import (
	"net"
	"syscall"
)

// peeker checks whether an idle connection is still clean: a non-blocking
// peek at its socket finds nothing to read. A closed one reads end of
// file, and one the upstream wrote to unasked cannot be trusted with a
// response either. It keeps what it needs, so a check allocates nothing.
type peeker struct {
	rc    syscall.RawConn
	clean bool
	buf   [1]byte
	fn    func(fd uintptr) bool
}

func newPeeker(nc net.Conn) *peeker {
	p := &peeker{}
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
	if p.rc == nil {
		return true
	}
	p.clean = false
	return p.rc.Read(p.fn) == nil && p.clean
}

// clientLeft waits until the client's connection nc has something to say,
// without reading it: end of file or an error means the client left;
// bytes (a request it sent ahead) that it is still there. A read deadline
// ends the wait (false).
func clientLeft(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	left := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EINTR {
				continue
			}
			if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
				return false // nothing yet: wait for the poller
			}
			left = err != nil || n == 0
			return true
		}
	})
	return err == nil && left
}
