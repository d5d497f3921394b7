package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
	"github.com/ratekeeper/ratekeeper/rules"
)

// R1: a dot segment whose ;params are percent-encoded (..%3B, .%3B) passes
// NormalizePath (it only refuses a literal "..;"), loosePath then drops the
// params without resolving the ".." that remains, and the upstream (the
// suite's own routes() oracle) routes it to the limited resource.
// R2: non-ASCII letters whose case mapping is ASCII (U+0130 İ -> i under
// Go's strings.ToLower, which routes() uses; also ı, ſ, K) are not folded.
func TestEncodedDotParamsAndUnicodeFolds(t *testing.T) {
	forms := []struct{ method, target string }{
		{"POST", "/v1/x/..%3B/posts"}, {"POST", "/v1/.%3B/posts"}, {"POST", "/v1/posts/.%3B"},
		{"POST", "/v1/x/%2e%2e%3bjsessionid=1/posts"}, {"GET", "/v1/%C4%B0tems"},
	}
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRoutingUpstream(t)
			addr := overLimit(t, tr, up)
			for _, v := range forms {
				body := ""
				if v.method == "POST" {
					body = "Content-Length: 0\r\n"
				}
				resp, _ := rawExchange(t, addr, v.method+" "+v.target+" HTTP/1.1\r\nHost: gw.test\r\n"+body+"\r\n")
				if hits := up.take(); len(hits) > 0 {
					t.Errorf("%s %s: %s, reached the limited resource uncounted: %q", v.method, v.target, resp.Status, hits)
				}
			}
		})
	}
}

// R3: method override. Rails (Rack::MethodOverride), Laravel/Symfony and
// Express's method-override run the handler of the method a POST names in
// X-HTTP-Method-Override (Symfony/Laravel also ?_method=).
func TestMethodOverride(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			var mu sync.Mutex
			var hits []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				m := r.Method
				if o := r.Header.Get("X-Http-Method-Override"); m == "POST" && o != "" {
					m = o
				} else if o := r.URL.Query().Get("_method"); m == "POST" && o != "" {
					m = o
				}
				if rt := routes(m, r.RequestURI); limited(rt) {
					mu.Lock()
					hits = append(hits, r.Method+" "+r.RequestURI+" -> "+rt)
					mu.Unlock()
				}
				io.WriteString(w, "ok")
			}))
			defer srv.Close()
			addr := startVia(t, tr, srv.URL, limitRules)
			rawExchange(t, addr, "GET /v1/items HTTP/1.1\r\nHost: gw.test\r\n\r\n") // the hour's one
			mu.Lock()
			hits = nil
			mu.Unlock()
			for _, req := range []string{
				"POST /v1/items HTTP/1.1\r\nHost: gw.test\r\nX-HTTP-Method-Override: GET\r\nContent-Length: 0\r\n\r\n",
				"POST /v1/items?_method=GET HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 0\r\n\r\n",
			} {
				resp, _ := rawExchange(t, addr, req)
				mu.Lock()
				if len(hits) > 0 {
					t.Errorf("%.60q: %s; the upstream ran GET /v1/items uncounted", req, resp.Status)
				}
				hits = nil
				mu.Unlock()
			}
		})
	}
}

// R4: a header name with an underscore never reaches the upstream, where
// CGI-style servers would read it as the dashed name the rules never saw.
func TestUnderscoreHeaders(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, defaultRules+"  - name: per-user\n    key: [header:X-User-ID]\n    on_missing_key: skip\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n")
			rawExchange(t, addr, "GET /a HTTP/1.1\r\nHost: gw.test\r\nX_User_ID: alice\r\nX_Real_IP: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\n\r\n")
			rawExchange(t, addr, "GET /a HTTP/1.0\r\nHost: gw.test\r\nX_User_ID: alice\r\n\r\n")
			for _, r := range up.take() {
				for k := range r.Header {
					if strings.Contains(k, "_") {
						t.Errorf("%s reached the upstream", k)
					}
				}
			}
		})
	}
}

// R5: a rule cannot key on a header the gateway drops or writes itself:
// check refuses it, naming the field.
func TestRuleOnStrippedHeader(t *testing.T) {
	for _, h := range []string{"CF-Connecting-IP", "True-Client-IP", "X-Forwarded-Host", "X_User_ID"} {
		_, err := rules.Parse("gw.yaml", []byte("rules:\n  - name: per-client\n    key: [header:"+h+"]\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n"))
		if err == nil || !strings.Contains(err.Error(), "gw.yaml:3: rules[0].key[0]") {
			t.Errorf("key header:%s: %v, want an error at gw.yaml:3: rules[0].key[0]", h, err)
		}
	}
}

// R6: Host forms. canonicalHost cuts the port at the last ':' and keeps
// ','; Express's req.hostname (X-Forwarded-Host behind a trusted proxy)
// takes the first element and cuts at the first ':'.
func TestHostForms(t *testing.T) {
	rules := "rules:\n  - name: tenant\n    match: {hosts: [api.example.com]}\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n"
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h := r.Header.Get("X-Forwarded-Host")
				h, _, _ = strings.Cut(h, ",")
				h, _, _ = strings.Cut(h, ":")
				if h == "api.example.com" {
					mu.Lock()
					n++
					mu.Unlock()
				}
			}))
			defer srv.Close()
			addr := startVia(t, tr, srv.URL, rules)
			for _, h := range []string{"api.example.com", "api.example.com:1:2", "api.example.com,x"} {
				rawExchange(t, addr, "GET /a HTTP/1.1\r\nHost: "+h+"\r\n\r\n")
			}
			if n > 1 {
				t.Errorf("the tenant api.example.com was served %d times under a 1/h limit", n)
			}
		})
	}
}

// R7: no write bound: a client that never reads a large answer holds the
// upstream's handler and connection for as long as it likes.
func TestSlowReaderFreesUpstream(t *testing.T) {
	chunk := strings.Repeat("z", 1<<20)
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			done := make(chan struct{}, 1)
			up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() { done <- struct{}{} }()
				w.Header().Set("Content-Length", strconv.Itoa(64*len(chunk)))
				for range 64 {
					if _, err := io.WriteString(w, chunk); err != nil {
						return
					}
				}
			}))
			addr := startVia(t, tr, up.URL, defaultRules+"client: {read_header_timeout: 300ms, idle_timeout: 1s, body_timeout: 300ms, write_timeout: 500ms}\n")
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			io.WriteString(nc, "GET /big HTTP/1.1\r\nHost: gw.test\r\n\r\n") // and never read
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("a client that reads nothing held the upstream request for 5s, every client bound at 1s or less")
			}
		})
	}
}

// R8: the header timeout restarts when the fast path hands off.
func TestHeaderTimeoutAcrossHandOff(t *testing.T) {
	up := newRecUpstream(t, nil)
	addr := startGateway(t, "fast", up.URL, defaultRules+"client: {read_header_timeout: 1s}\n")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	trickle := func(s string, d time.Duration) {
		for i := range len(s) {
			nc.Write([]byte{s[i]})
			time.Sleep(d / time.Duration(len(s)))
		}
	}
	trickle("GET /a HTTP/1.1\r\nHost: gw.test\r\nX-A: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", 800*time.Millisecond)
	trickle("Expect: x\r\n", 50*time.Millisecond) // forces the hand-off
	trickle("X-B: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n\r\n", 800*time.Millisecond)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	// The timeout cuts the head: net/http closes the connection, or, when
	// it cut a line short of its colon, answers its bare 400 (textproto
	// reads the half line as a malformed header). A head read whole would
	// get 417 for its Expect, or go upstream.
	if resp, err := http.ReadResponse(bufio.NewReader(nc), nil); err == nil {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != 400 || string(body) != "400 Bad Request" {
			t.Errorf("a head that took %v under read_header_timeout 1s was read and answered: %s %q", time.Since(start).Round(10*time.Millisecond), resp.Status, body)
		}
	}
	if reqs := up.take(); len(reqs) > 0 {
		t.Errorf("the upstream got %d requests", len(reqs))
	}
}

// R9: a HEAD answered with a late body (a broken upstream): the body is
// read as another client's answer on the pooled connection. The peek at
// reuse sees only bytes that arrived already.
func TestLateHeadBody(t *testing.T) {
	poison := "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nPOISONED\n"
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.Method == "HEAD" {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(poison))+"\r\n\r\n")
						time.Sleep(50 * time.Millisecond)
						io.WriteString(c, poison)
						continue
					}
					body := "answer to " + req.URL.Path + "\n"
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
				}
			})
			addr := startVia(t, tr, up, defaultRules)
			rawExchange(t, addr, "HEAD /a HTTP/1.1\r\nHost: gw.test\r\n\r\n")
			if _, got := rawExchange(t, addr, "GET /b HTTP/1.1\r\nHost: gw.test\r\n\r\n"); strings.Contains(got, "POISONED") {
				t.Errorf("GET /b (another client) got HEAD /a's late body: %q", got)
			}
		})
	}
}
