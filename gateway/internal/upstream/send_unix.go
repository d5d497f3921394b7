//go:build unix

package upstream

import (
	"io"
	"net"
	"os"
	"syscall"
)

// sendConn returns the socket that Send writes within a read, or nil:
// over TLS, or a connection that is not a socket, Send is a plain flush.
func sendConn(nc net.Conn) syscall.RawConn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// WriteRead writes out to nc, whose socket is rc, and then reads into p,
// in one wait of the poller. The poller's readiness is reset before the
// write, so an answer that comes at once is not missed. There is no read
// that finds nothing before the wait, as there is in a Write and a Read.
// What the socket does not take at once is written by nc.Write, and p is
// then read by nc.Read. Errors are those of nc.Write and nc.Read.
func WriteRead(nc net.Conn, rc syscall.RawConn, out, p []byte) (int, error) {
	var (
		n          int
		rerr, werr error
	)
	err := rc.Read(func(fd uintptr) bool {
		for len(out) > 0 {
			m, err := syscall.Write(int(fd), out)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || m <= 0 {
				if err != syscall.EAGAIN {
					werr = err
				}
				return true
			}
			if out = out[m:]; len(out) == 0 {
				return false // sent: wait for the answer
			}
		}
		for {
			m, err := syscall.Read(int(fd), p)
			if err == syscall.EINTR {
				continue
			}
			if err == syscall.EAGAIN {
				return false
			}
			n, rerr = max(m, 0), err
			return true
		}
	})
	switch {
	case err != nil:
		if len(out) > 0 {
			nc.Write(out) // a deadline had passed before the write: within its own
		}
		if oe, ok := err.(*net.OpError); ok {
			oe.Op = "read"
		}
		return 0, err
	case werr != nil:
		return 0, opError(nc, "write", werr)
	case len(out) > 0: // the socket's buffer was full
		if _, err := nc.Write(out); err != nil {
			return 0, err
		}
		return nc.Read(p)
	case rerr != nil:
		return 0, opError(nc, "read", rerr)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// opError wraps a system call's error as package net does.
func opError(nc net.Conn, op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: nc.LocalAddr(), Addr: nc.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}
