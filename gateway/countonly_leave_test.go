package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A client that sends a form and leaves before the answer still gets its
// account created upstream. The gateway never sees the 201, so the
// request must count as an outcome it could not read: else one IP
// creates accounts without end by hanging up early.
func TestAccountsClientLeavingStillCounts(t *testing.T) {
	var created atomic.Int64
	arrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || !strings.Contains(r.PostForm.Get("email"), "@") {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		created.Add(1)
		arrived <- struct{}{}
		<-r.Context().Done() // the gateway hung up: the answer comes too late
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	const rules = `rules:
  - name: accounts-per-ip
    match: {methods: [POST], path: /accounts}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 3, period: 1d}
    count_only: {status: [201]}
`
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			created.Store(0)
			g := runGateway(t, transport, up.URL, rules)
			addr := g.Addr().String()
			const state = "/v1/rules/accounts-per-ip/state?ip=127.0.0.1&method=POST&path=/accounts"
			const body = "email=a%40example.com"
			for i := range 6 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				req := "POST /accounts HTTP/1.1\r\nHost: gw.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
					strconv.Itoa(len(body)) + "\r\n\r\n" + body
				if _, err := c.Write([]byte(req)); err != nil {
					t.Fatal(err)
				}
				answer := make(chan int, 1)
				go func() {
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err != nil {
						answer <- 0
						return
					}
					answer <- resp.StatusCode
				}()
				select {
				case <-arrived:
					c.Close() // hang up before the answer
					<-answer
					// Counted when the gateway gives up on the upstream:
					// wait for it, so the next attempt is not in flight beside it.
					for deadline := time.Now().Add(10 * time.Second); adminStateOf(t, g, "GET", state).Remaining > 3-(i+1); {
						if time.Now().After(deadline) {
							t.Fatalf("attempt %d that reached the upstream was never counted", i+1)
						}
						time.Sleep(time.Millisecond)
					}
				case code := <-answer:
					c.Close()
					if code != http.StatusTooManyRequests {
						t.Fatalf("attempt %d: the gateway answered %d before the upstream saw it, want 429", i+1, code)
					}
				}
			}
			if got := created.Load(); got > 3 {
				t.Errorf("one IP created %d accounts by leaving before the answer; the limit is 3", got)
			}
		})
	}
}

// count_only: {status: [101]} limits upgrades (WebSocket sessions per IP),
// as docs/gateway.md says a 101 counts if listed. ReverseProxy answers an
// upgrade by hijacking the connection, never through WriteHeader.
func TestCountOnlyCountsHijackedUpgrade(t *testing.T) {
	var upgraded atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer nc.Close()
		upgraded.Add(1)
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
	}))
	t.Cleanup(up.Close)
	const rules = `rules:
  - name: sockets-per-ip
    match: {path: /ws}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 2, period: 1d}
    count_only: {status: [101]}
`
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			upgraded.Store(0)
			g := runGateway(t, transport, up.URL, rules)
			addr := g.Addr().String()
			const state = "/v1/rules/accounts-per-ip/state?ip=127.0.0.1&method=POST&path=/accounts"
			codes := ""
			for range 4 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				c.Write([]byte("GET /ws HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				codes += strconv.Itoa(resp.StatusCode) + " "
				if resp.StatusCode == http.StatusSwitchingProtocols {
					io.Copy(io.Discard, c) // the upstream closes: the session is over
				}
				c.Close()
			}
			if got := upgraded.Load(); got != 2 || codes != "101 101 429 429 " {
				t.Errorf("%d upgrades passed (answers %s), want 2 then 429s", got, codes)
			}
		})
	}
}
