//go:build !unix

package upstream

import (
	"net"
	"syscall"
)

// sendConn returns nil: Send is a plain flush here.
func sendConn(net.Conn) syscall.RawConn { return nil }

// WriteRead writes out to nc and then reads into p.
func WriteRead(nc net.Conn, _ syscall.RawConn, out, p []byte) (int, error) {
	if _, err := nc.Write(out); err != nil {
		return 0, err
	}
	return nc.Read(p)
}
