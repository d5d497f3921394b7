package gateway

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/ratekeeper/ratekeeper/rules"
)

// capListener caps the connections one client address holds open
// (client.max_conns_per_ip): a connection beyond the cap is closed as soon
// as it is accepted, before a byte is read. The address is the TCP peer's,
// masked as client_ip masks keys (an IPv6 client owns its whole /64), and
// trusted proxies are exempt: behind a load balancer every connection
// comes from it.
type capListener struct {
	net.Listener
	max     int
	rules   func() *rules.Set
	refused interface{ Inc() } // may be nil

	mu   sync.Mutex
	open map[netip.Addr]int
}

func newCapListener(ln net.Listener, max int, rules func() *rules.Set, refused interface{ Inc() }) *capListener {
	return &capListener{Listener: ln, max: max, rules: rules, refused: refused, open: map[netip.Addr]int{}}
}

// Accept returns the next connection within the cap.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
		if err != nil {
			return nc, nil // not an IP peer: nothing to count by
		}
		ci := l.rules().ClientIP()
		if ci.TrustsAddr(ap.Addr()) {
			return nc, nil
		}
		key := ci.Prefix(ap.Addr())
		l.mu.Lock()
		if l.open[key] >= l.max {
			l.mu.Unlock()
			nc.Close()
			if l.refused != nil {
				l.refused.Inc()
			}
			continue
		}
		l.open[key]++
		l.mu.Unlock()
		return &cappedConn{Conn: nc, l: l, key: key}, nil
	}
}

func (l *capListener) release(key netip.Addr) {
	l.mu.Lock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
	l.mu.Unlock()
}

// cappedConn gives its place back when it closes.
type cappedConn struct {
	net.Conn
	l      *capListener
	key    netip.Addr
	closed atomic.Bool
}

func (c *cappedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.key)
	}
	return c.Conn.Close()
}

// SyscallConn reaches the socket under the wrapper (the fast path peeks at
// it to notice a client that leaves).
func (c *cappedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}
