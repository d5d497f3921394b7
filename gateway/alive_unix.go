//go:build unix

package gateway

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open: a non-blocking
// peek finds nothing to read. A closed one reads end of file, and one the
// upstream wrote to unasked cannot be trusted with a response either.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait
	})
	return err == nil && ok
}
