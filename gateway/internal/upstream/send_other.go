//go:build !unix

package upstream

import (
	"net"
	"syscall"
)

// sendConn returns nil: Send is a plain flush here.
func sendConn(net.Conn) syscall.RawConn { return nil }

// sendRead is never called: Send defers no write without a socket.
func (c *Conn) sendRead(p []byte) (int, error) { return c.nc.Read(p) }
