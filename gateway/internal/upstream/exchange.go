package upstream

import (
	"net"
	"syscall"
)

// Exchange writes and then reads on one socket, in one wait of the
// poller (WriteRead). It is a connection's: one goroutine at a time uses
// it, and a use allocates nothing.
type Exchange struct {
	nc     net.Conn
	rc     syscall.RawConn
	fn     func(fd uintptr) bool // step, made once
	out, p []byte
	n      int
	rerr   error
	werr   error
}

// NewExchange returns the exchange over nc, whose socket is rc.
func NewExchange(nc net.Conn, rc syscall.RawConn) *Exchange {
	x := &Exchange{nc: nc, rc: rc}
	x.fn = x.step
	return x
}
