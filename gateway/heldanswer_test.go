package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
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

// An upstream that closes each connection after one answer, without
// saying so: the pooled connection is dead when the next request comes.
// Each request still gets its answer, and the upstream sees each once:
// none lost, none sent twice. The direct transport checks a connection
// as it takes it; http.Transport learns of the close from its reader
// goroutine, a window docs/security.md states, so it is not tested here.
func TestUpstreamClosesPooledConnections(t *testing.T) {
	for _, tr := range transports {
		if tr.upstream != "direct" {
			continue
		}
		t.Run(tr.String(), func(t *testing.T) {
			var requests atomic.Int64
			closed := make(chan struct{}, 16)
			up := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				requests.Add(1)
				body := "answer to " + req.Method + " " + req.URL.Path
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
				c.Close()
				closed <- struct{}{}
			})
			addr := startVia(t, tr, up, defaultRules)
			n := 0
			for _, method := range []string{"GET", "POST", "GET", "POST"} {
				n++
				path := "/" + strconv.Itoa(n)
				body := ""
				if method == "POST" {
					body = "Content-Length: 4\r\n\r\nonce"
				} else {
					body = "\r\n"
				}
				resp, got := rawExchange(t, addr, method+" "+path+" HTTP/1.1\r\nHost: gw.test\r\n"+body)
				if resp.StatusCode != 200 || got != "answer to "+method+" "+path {
					t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, got)
				}
				<-closed // the connection the gateway pooled is closed now
			}
			if got := requests.Load(); got != int64(n) {
				t.Errorf("the upstream saw %d requests, want %d", got, n)
			}
		})
	}
}
