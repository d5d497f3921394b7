//go:build unix

package fastpath

import (
	"crypto/tls"
	"net"
	"syscall"
)

// clientLeft waits until the client's connection nc has something to say,
// without reading it: end of file or an error means the client left;
// bytes (a request it sent ahead) that it is still there. A read deadline
// ends the wait (false).
func clientLeft(nc net.Conn) bool {
	if tc, ok := nc.(*tls.Conn); ok {
		// The socket under TLS: a client that closes it has left; one
		// that sends a record (even close_notify) is taken as there.
		nc = tc.NetConn()
	}
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
