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

// WriteRead writes out and then reads into p, in one wait of the poller.
// The poller's readiness is reset before the write, so an answer that
// comes at once is not missed. There is no read that finds nothing before
// the wait, as there is in a Write and a Read. What the socket does not
// take at once is written by the connection's Write, and p is then read
// by its Read. Errors are those of Write and Read.
func (x *Exchange) WriteRead(out, p []byte) (int, error) {
	x.out, x.p, x.n, x.rerr, x.werr = out, p, 0, nil, nil
	err := x.rc.Read(x.fn)
	out, n, rerr, werr := x.out, x.n, x.rerr, x.werr
	x.out, x.p = nil, nil
	switch {
	case err != nil:
		if len(out) > 0 {
			x.nc.Write(out) // a deadline had passed before the write: within its own
		}
		if oe, ok := err.(*net.OpError); ok {
			oe.Op = "read"
		}
		return 0, err
	case werr != nil:
		return 0, x.opError("write", werr)
	case len(out) > 0: // the socket's buffer was full
		if _, err := x.nc.Write(out); err != nil {
			return 0, err
		}
		return x.nc.Read(p)
	case rerr != nil:
		return 0, x.opError("read", rerr)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// step is the poller's callback: write what is left of out, then read.
// It returns false to wait for the socket to be readable.
func (x *Exchange) step(fd uintptr) bool {
	for len(x.out) > 0 {
		m, err := syscall.Write(int(fd), x.out)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			if err != syscall.EAGAIN {
				x.werr = err
			}
			return true
		}
		if x.out = x.out[m:]; len(x.out) == 0 {
			return false // sent: wait for the answer
		}
	}
	for {
		m, err := syscall.Read(int(fd), x.p)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			return false
		}
		x.n, x.rerr = max(m, 0), err
		return true
	}
}

// opError wraps a system call's error as package net does.
func (x *Exchange) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: x.nc.LocalAddr(), Addr: x.nc.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}
