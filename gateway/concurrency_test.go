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

const concRule = `upstream_timeouts: {response_header: 300ms}
rules:
  - name: one-at-a-time
    match: {path_prefix: /c}
    concurrency: {max: 1}
`

// A concurrency rule's slot is held while the response is sent and given
// back when it ends, on both client transports (the fast path hands such
// requests to net/http): a normal end, a client that leaves mid-body, an
// upstream that fails, an upstream that times out. Each case is followed
// by a request that must pass well before the slot's 30s lease could have
// expired: only a release frees it that soon.
func TestConcurrencyReleased(t *testing.T) {
	midBody := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/c/slow-body":
			io.WriteString(w, strings.Repeat("x", 1024))
			w.(http.Flusher).Flush()
			midBody <- struct{}{}
			<-r.Context().Done() // until the gateway gives up on it
		case "/c/fail":
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		case "/c/hang":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		default:
			io.WriteString(w, "ok")
		}
	}))
	defer up.Close()
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			g := runGateway(t, transport, up.URL, concRule)
			base := "http://" + g.Addr().String()
			get := func(path string) int {
				resp, err := http.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			// The slot is free again within a deadline far below the TTL.
			free := func(after string) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for get("/c/ok") != 200 {
					if time.Now().After(deadline) {
						t.Fatalf("after %s, the slot was not released", after)
					}
					time.Sleep(10 * time.Millisecond) // the polling interval
				}
			}
			for range 3 {
				if code := get("/c/ok"); code != 200 {
					t.Fatalf("sequential requests: %d", code)
				}
			}
			if code := get("/other"); code != 200 {
				t.Fatalf("a request no rule matches: %d", code)
			}

			// A client that leaves mid-body.
			c, err := net.Dial("tcp", g.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "GET /c/slow-body HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("slow body: %v %v", resp, err)
			}
			<-midBody
			if code := get("/c/ok"); code != http.StatusTooManyRequests {
				t.Fatalf("while a response is being sent: %d, want 429", code)
			}
			c.Close()
			free("a client left mid-body")

			if code := get("/c/fail"); code != http.StatusBadGateway {
				t.Fatalf("failing upstream: %d", code)
			}
			free("an upstream failure")

			if code := get("/c/hang"); code < 500 {
				t.Fatalf("hanging upstream: %d", code)
			}
			free("an upstream timeout")
		})
	}
}

// BenchmarkFastPathConcurrency is BenchmarkFastPath with a concurrency rule
// instead of the rate rule: the fast path hands every request to net/http,
// which holds the slot until the response ends.
func BenchmarkFastPathConcurrency(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }))
	defer up.Close()
	rule := "rules:\n  - name: per-ip\n    key: [ip]\n    concurrency: {max: 1000000}\n"
	g := runGateway(b, "fast", up.URL, rule)
	getParallel(b, "http://"+g.Addr().String()+"/v1/items/7")
}

// A concurrency rule's slots come back however a client ends its
// requests: HTTP/2 streams reset before and after they reached the
// upstream, and an upgraded (WebSocket) connection the client closes. Each
// ends with a request that must pass well before a lease could expire.
func TestConcurrencySlotsComeBack(t *testing.T) {
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
				// What the reset streams left in reached is not this
				// stream's arrival; a fresh connection is not one whose
				// many resets the server may hold against it.
				for len(reached) > 0 {
					<-reached
				}
				c := dialH2C(t, addr)
				id := c.open(true, h2get("/c/hang")...)
				select {
				case <-reached:
				case <-time.After(20 * time.Second):
					// What the gateway answered instead: a 429 means the
					// concurrency rule held no free slot.
					t.Fatalf("the upstream was not asked; the gateway answered %s", c.wait(id)[id])
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
