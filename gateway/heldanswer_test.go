package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The fast path holds the end of a keep-alive response until it reads
// the next request, and writes it with that read. A request that is
// already buffered (pipelined, or a TLS record read with the one
// before) needs no read: the held answer must still go out before the
// next request goes upstream. Here the upstream answers /b only once the
// client has /a's answer, so a held answer shows as a wait of seconds.
func TestPipelinedAnswerNotHeld(t *testing.T) {
	e := newEdge(t)
	for _, mode := range []string{"clear", "tls one record", "tls two records"} {
		t.Run(mode, func(t *testing.T) {
			gotA := make(chan struct{})
			var waited atomic.Bool
			up := newRecUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/b" {
					select {
					case <-gotA:
					case <-time.After(5 * time.Second): // against a hang
						waited.Store(true)
					}
				}
				io.WriteString(w, "answer to "+r.URL.Path)
			})
			extra := ""
			if mode != "clear" {
				extra = e.tlsSection()
			}
			addr := startGateway(t, "fast", up.URL, extra)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			held := &heldWrites{Conn: nc}
			if mode != "clear" {
				nc = tls.Client(held, &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
				if err := nc.(*tls.Conn).Handshake(); err != nil {
					t.Fatal(err)
				}
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(20 * time.Second))
			a, b := "GET /a HTTP/1.1\r\nHost: gw.test\r\n\r\n", "GET /b HTTP/1.1\r\nHost: gw.test\r\n\r\n"
			if mode == "tls two records" {
				// Two records in one segment: the gateway's TLS reads
				// both, and hands over one at a time.
				held.hold = true
				io.WriteString(nc, a)
				io.WriteString(nc, b)
				held.release()
			} else {
				io.WriteString(nc, a+b)
			}
			br := bufio.NewReader(nc)
			for i, path := range []string{"/a", "/b"} {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || string(body) != "answer to "+path {
					t.Errorf("%s: %d %q", path, resp.StatusCode, body)
				}
				if i == 0 {
					close(gotA)
				}
			}
			if waited.Load() {
				t.Error("the answer to /a was held until /b's upstream gave up waiting for it")
			}
		})
	}
}

// heldWrites keeps what is written while hold is set, for release to
// write at once.
type heldWrites struct {
	net.Conn
	hold bool
	buf  []byte
}

func (c *heldWrites) Write(p []byte) (int, error) {
	if c.hold {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *heldWrites) release() {
	c.hold = false
	c.Conn.Write(c.buf)
}
