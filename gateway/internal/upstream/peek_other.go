//go:build !unix

package upstream

import (
	"crypto/tls"
	"net"
)

// peeker cannot peek at a socket here: it trusts the connection, and the
// request fails (502) if the upstream closed it while idle. Over TLS it
// still reads what the TLS connection holds (readTLS).
type peeker struct {
	tls *tls.Conn
	buf [1]byte
}

func newPeeker(nc net.Conn) *peeker {
	tc, _ := nc.(*tls.Conn)
	return &peeker{tls: tc}
}

func (p *peeker) alive() bool { return p.tls == nil || readTLS(p.tls, p.buf[:]) }
