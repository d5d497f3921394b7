package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
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
			const state = "/v1/rules/sockets-per-ip/state?ip=127.0.0.1&method=GET&path=/ws"
			codes := ""
			for i := range 4 {
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
				// The gateway counts a session when it has ended on its
				// side too; until then it is in flight, which count_only
				// may let past the limit (docs/gateway.md).
				for deadline := time.Now().Add(10 * time.Second); i < 2; {
					if st := adminStateOf(t, g, "GET", state); st.Remaining == 1-i {
						break
					} else if time.Now().After(deadline) {
						t.Fatalf("after session %d: remaining %d, want %d", i+1, st.Remaining, 1-i)
					}
					time.Sleep(time.Millisecond) // poll
				}
			}
			if got := upgraded.Load(); got != 2 || codes != "101 101 429 429 " {
				t.Errorf("%d upgrades passed (answers %s), want 2 then 429s", got, codes)
			}
		})
	}
}

// A client that leaves counts as docs/gateway.md says, over HTTP/1.1 and
// HTTP/2 on both transports: before the head whatever the list (the
// upstream may have acted), after the head as its status. A rule metered
// from the body settles last, when the gateway is done with the request:
// once it has, the count_only rules must read as they will stay.
func TestCountOnlyClientLeavesEveryProtocol(t *testing.T) {
	arrived := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if code, _ := strconv.Atoi(r.URL.Query().Get("head")); code != 0 {
			w.WriteHeader(code)
			io.WriteString(w, "{\"id\":")
			http.NewResponseController(w).Flush()
		}
		arrived <- struct{}{}
		<-r.Context().Done() // the gateway hung up
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	const rules = `h2c: true
rules:
  - name: created
    match: {methods: [POST], path: /accounts}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 3, period: 1d}
    count_only: {status: [201]}
  - name: failed
    match: {methods: [POST], path: /accounts}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 3, period: 1d}
    count_only: {status: [4xx]}
  - name: metered
    match: {methods: [POST], path: /accounts}
    key: [ip]
    cost: {response_json: usage.total_tokens, max: 100, default: 7}
    limit: {algorithm: token_bucket, rate: 100, period: 1d}
`
	for _, transport := range []string{"fast", "standard"} {
		for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
			for _, tc := range []struct {
				head            int // the status the upstream sends before the client leaves; 0: none
				created, failed int // the remaining of each count_only rule after
			}{{0, 2, 2}, {201, 2, 3}, {400, 3, 2}} {
				t.Run(fmt.Sprintf("%s/%s/head %d", transport, proto, tc.head), func(t *testing.T) {
					g := runGateway(t, transport, up.URL, rules)
					target := "/accounts?head=" + strconv.Itoa(tc.head)
					if proto == "HTTP/2" {
						leaveH2(t, g.Addr().String(), target, tc.head, arrived)
					} else {
						leaveH1(t, g.Addr().String(), target, tc.head, arrived)
					}
					state := func(rule string) int {
						return adminStateOf(t, g, "GET", "/v1/rules/"+rule+"/state?ip=127.0.0.1&method=POST&path=/accounts").Remaining
					}
					for deadline := time.Now().Add(10 * time.Second); state("metered") > 93; {
						if time.Now().After(deadline) {
							t.Fatalf("the metered rule never settled (remaining %d, want 93)", state("metered"))
						}
						time.Sleep(time.Millisecond)
					}
					if c, f := state("created"), state("failed"); c != tc.created || f != tc.failed {
						t.Errorf("remaining created %d, failed %d; want %d, %d", c, f, tc.created, tc.failed)
					}
				})
			}
		}
	}
}

// leaveH1 posts target over HTTP/1.1 and closes the connection once the
// upstream has it, and the head has come if head is a status.
func leaveH1(t *testing.T, addr, target string, head int, arrived chan struct{}) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // against a hang, not a wait
	io.WriteString(c, "POST "+target+" HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 0\r\n\r\n")
	<-arrived
	if head != 0 {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != head {
			t.Fatalf("the head: %v %v", resp, err)
		}
	}
}

// leaveH2 is leaveH1 over h2c: the client resets the stream.
func leaveH2(t *testing.T, addr, target string, head int, arrived chan struct{}) {
	c := dialH2C(t, addr)
	id := c.open(true, ":method", "POST", ":scheme", "http", ":authority", "gw.test", ":path", target, "content-length", "0")
	<-arrived
	for head != 0 && c.answers[id].status == 0 && c.dead == nil {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the head: %v", err)
		}
		c.handle(f)
	}
	if c.answers[id].status != head {
		t.Fatalf("the head: %s", c.answers[id])
	}
	c.write(c.fr.WriteRSTStream(id, http2.ErrCodeCancel))
}
