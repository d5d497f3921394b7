package fastpath

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// deadlines records the read deadlines set on a connection.
type deadlines struct {
	net.Conn
	set []time.Time
}

func (c *deadlines) SetReadDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

// TestHandedOffConnKeepsHeadDeadline: net/http's first read deadline on a
// connection handed off is no later than the fast path's header deadline,
// so that a client cannot win a second header timeout by forcing the
// hand-off; the deadlines after it are net/http's own.
func TestHandedOffConnKeepsHeadDeadline(t *testing.T) {
	head := time.Unix(1000, 0)
	for _, tc := range []struct {
		name        string
		first, want time.Time
	}{
		{"none", time.Time{}, head},
		{"later", head.Add(time.Minute), head},
		{"earlier", head.Add(-time.Second), head.Add(-time.Second)},
	} {
		nc := &deadlines{}
		c := &bufferedConn{Conn: nc, headDeadline: head}
		c.SetReadDeadline(tc.first)
		c.SetReadDeadline(time.Time{})
		c.SetReadDeadline(head.Add(time.Hour))
		want := []time.Time{tc.want, {}, head.Add(time.Hour)}
		if len(nc.set) != len(want) || !nc.set[0].Equal(want[0]) || !nc.set[1].Equal(want[1]) || !nc.set[2].Equal(want[2]) {
			t.Errorf("%s: deadlines %v, want %v", tc.name, nc.set, want)
		}
	}
	// Without a header deadline (a keep-alive connection between
	// requests), every deadline is net/http's.
	nc := &deadlines{}
	(&bufferedConn{Conn: nc}).SetReadDeadline(time.Time{})
	if len(nc.set) != 1 || !nc.set[0].IsZero() {
		t.Errorf("no head deadline: deadlines %v, want none", nc.set)
	}
}

// TestHandedOffConnReadsBufferedFirst: net/http reads the bytes the fast
// path buffered, then the connection.
func TestHandedOffConnReadsBufferedFirst(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	br := bufio.NewReader(server)
	go func() {
		io.WriteString(client, "GET / HTTP/1.0\r\n")
		io.WriteString(client, "\r\n")
		client.Close()
	}()
	if _, err := br.Peek(len("GET / HTTP/1.0\r\n")); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(&bufferedConn{Conn: server, r: br})
	if err != nil || string(b) != "GET / HTTP/1.0\r\n\r\n" {
		t.Errorf("read %q, %v", b, err)
	}
}

// TestHandOffAfterStop: a connection handed off once net/http's server has
// stopped is closed, and Accept reports the listener closed.
func TestHandOffAfterStop(t *testing.T) {
	l := newHandoffListener(nil)
	got := make(chan net.Conn)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	a, b := net.Pipe()
	defer b.Close()
	if !l.give(a) || <-got != a {
		t.Fatal("the connection did not reach Accept")
	}
	l.Close()
	c, d := net.Pipe()
	if !l.give(c) {
		t.Error("give after Close: the connection is still the fast path's")
	}
	d.SetReadDeadline(time.Now().Add(5 * time.Second)) // a failure, not a hang
	if _, err := d.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("give after Close: the connection reads %v, want EOF (closed)", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
}
