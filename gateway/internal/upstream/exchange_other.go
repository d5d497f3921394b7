//go:build !unix

package upstream

import (
	"net"
	"syscall"
)

// sendConn returns nil: Send is a plain flush here.
func sendConn(net.Conn) syscall.RawConn { return nil }

// WriteRead writes out and then reads into p.
func (x *Exchange) WriteRead(out, p []byte) (int, error) {
	if _, err := x.nc.Write(out); err != nil {
		return 0, err
	}
	return x.nc.Read(p)
}

func (x *Exchange) step(uintptr) bool { return true }
