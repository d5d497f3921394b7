package fastpath

import (
	"io"
	"net"
	"testing"
	"time"
)

// socketPair returns a socket over one end of a loopback TCP connection,
// and the other end.
func socketPair(t *testing.T) (*socket, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s := newSocket(nc)
	if s == nil {
		t.Fatal("a TCP connection is not a socket")
	}
	t.Cleanup(func() { s.Close() })
	peer.SetDeadline(time.Now().Add(10 * time.Second))
	s.SetDeadline(time.Now().Add(10 * time.Second))
	return s, peer
}

// hold writes p to s as flushResponse does: held for the next read.
func hold(s *socket, p string) {
	s.deferW = true
	io.WriteString(s, p)
	s.deferW = false
}

// Held bytes go out first: with the next read, before the next write,
// and before the close.
func TestSocketKeepsOrder(t *testing.T) {
	s, peer := socketPair(t)
	hold(s, "one ")
	io.WriteString(s, "two ")
	hold(s, "three")
	go io.WriteString(peer, "ask")
	buf := make([]byte, 8)
	if n, err := s.Read(buf); err != nil || string(buf[:n]) != "ask" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	hold(s, " four")
	s.Close()
	if b, _ := io.ReadAll(peer); string(b) != "one two three four" {
		t.Errorf("the peer read %q", b)
	}
}
