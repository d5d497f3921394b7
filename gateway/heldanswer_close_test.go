package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Review: a client that ends its side right after its request (TCP
// half-close, or TLS close_notify in the request's segment) still gets
// the whole answer the fast path holds the end of. (net/http takes the
// close for a client gone, and sends an empty body.)
func TestHeldAnswerAfterClientClose(t *testing.T) {
	e := newEdge(t)
	up := newRecUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "answer") })
	for _, mode := range []string{"clear", "tls"} {
		t.Run(mode, func(t *testing.T) {
			extra := ""
			if mode == "tls" {
				extra = e.tlsSection()
			}
			addr := startGateway(t, "fast", up.URL, extra)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			held := &heldWrites{Conn: nc}
			var conn net.Conn = held
			if mode == "tls" {
				tc := tls.Client(held, &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				conn = tc
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			held.hold = true
			io.WriteString(conn, "GET /a HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			if tc, ok := conn.(*tls.Conn); ok {
				tc.CloseWrite()                                       // close_notify, in the request's segment
				nc.SetWriteDeadline(time.Now().Add(10 * time.Second)) // CloseWrite ended writes
			}
			held.release()
			if mode == "clear" {
				nc.(*net.TCPConn).CloseWrite()
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != "answer" || err != nil {
				t.Errorf("%d %q %v", resp.StatusCode, body, err)
			}
		})
	}
}
