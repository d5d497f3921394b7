package gateway

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
)

// Found in review: a GET on a pooled upstream connection whose answer
// takes longer than response_header is answered 502 once, and reaches
// the upstream once, as http.Transport sends it. A timeout is no sign of
// a connection the upstream closed while idle (Conn.Stale): sending the
// request again on a new one gives the upstream two requests the rules
// counted once.
func TestSlowAnswerNotSentTwice(t *testing.T) {
	var slow atomic.Int32
	up := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/slow" {
				slow.Add(1)
				br.ReadByte() // no answer: until the gateway closes
				return
			}
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		}
	})
	cases := []struct {
		name, client, extra string
		get                 func(addr, path string) int
	}{
		{"fast/direct", "fast", "upstream_transport: direct\n", func(addr, path string) int {
			resp, _ := rawExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			return resp.StatusCode
		}},
		{"standard/direct", "standard", "upstream_transport: direct\n", func(addr, path string) int {
			resp, _ := rawExchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			return resp.StatusCode
		}},
		{"h2 frames", "fast", framesH2C, func(addr, path string) int {
			return dialH2C(t, addr).get(h2get(path)...).status
		}},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			slow.Store(0)
			addr := startGateway(t, tc.client, up, tc.extra+"upstream_timeouts: {response_header: 1s}\nrules: []\n")
			if s := tc.get(addr, "/fast"); s != 200 {
				t.Fatalf("GET /fast: %d", s) // leaves a pooled connection
			}
			if s := tc.get(addr, "/slow"); s != http.StatusBadGateway {
				t.Errorf("GET /slow: %d, want 502", s)
			}
			if n := slow.Load(); n != 1 {
				t.Errorf("the upstream got GET /slow %d times, want once", n)
			}
		})
	}
}
