package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A concurrency rule's slots come back however a client ends its
// requests: HTTP/2 streams reset before and after they reached the
// upstream, and an upgraded (WebSocket) connection the client closes. Each
// ends with a request that must pass well before a lease could expire.
func TestConcurrencySlotsSurviveAttacks(t *testing.T) {
	reached := make(chan struct{}, 100)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/c/hang":
			reached <- struct{}{}
			<-r.Context().Done()
		case "/c/ws":
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "websocket")
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			io.Copy(c, brw) // echo until the client goes
		default:
			io.WriteString(w, "ok")
		}
	}))
	defer up.Close()
	rule := "h2c: true\n" + strings.Replace(concRule, "max: 1", "max: 2", 1)
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, up.URL, rule)
			// passes waits, up to a deadline, until both slots are free
			// again: a slot comes back when the gateway sees its request
			// end, a moment after the client's reset or close; one that
			// never comes back fails.
			passes := func(what string) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for {
					a := dialH2C(t, addr).get(h2get("/c/ok")...)
					b := dialH2C(t, addr).get(h2get("/c/ok")...)
					if a.status == 200 && b.status == 200 {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("after %s, 5s on: %s, %s", what, a, b)
					}
					time.Sleep(20 * time.Millisecond) // polling, bounded above
				}
			}
			c := dialH2C(t, addr)
			for range 50 {
				id := c.open(true, h2get("/c/hang")...)
				c.write(c.fr.WriteRSTStream(id, http2.ErrCodeCancel))
			}
			passes("50 streams reset at once")
			for range 5 {
				id := c.open(true, h2get("/c/hang")...)
				select {
				case <-reached:
				case <-time.After(5 * time.Second):
					t.Fatal("the upstream was not asked")
				}
				c.write(c.fr.WriteRSTStream(id, http2.ErrCodeCancel))
				passes("a stream reset while the upstream held it")
			}
			for range 3 {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				io.WriteString(nc, "GET /c/ws HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
				nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
				if err != nil || resp.StatusCode != 101 {
					t.Fatalf("upgrade: %v %v", resp, err)
				}
				nc.Close()
				passes("an upgraded connection closed by the client")
			}
		})
	}
}
