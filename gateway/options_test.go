package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// rawGet sends head (a request without its final blank line) over a new
// connection to addr and reads the response.
func rawGet(t *testing.T, addr, head string) (*http.Response, string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, head+"\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestGatewayResponseCost: the upstream's X-Tokens is charged after its
// response, on both client transports (the fast path hands such requests
// to net/http).
func TestGatewayResponseCost(t *testing.T) {
	up := newRecUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens", "8")
		io.WriteString(w, "done")
	})
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			g := runGateway(t, transport, up.URL, `rules:
  - name: tokens
    key: [ip]
    cost: {response_header: X-Tokens, max: 10}
    limit: {algorithm: token_bucket, rate: 1, period: 1h, burst: 10}
`)
			addr := g.Addr().String()
			var codes []int
			for range 3 {
				resp, _ := rawGet(t, addr, "GET /v1/complete HTTP/1.1\r\nHost: x\r\nConnection: close\r\n")
				codes = append(codes, resp.StatusCode)
			}
			// 10, then 2 left, then 6 in debt.
			if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
				t.Errorf("codes %v", codes)
			}
			if transport == "fast" && handOffCount(addr) == 0 {
				t.Error("the fast path served a request whose cost comes after its response")
			}
		})
	}
}

// TestGatewayTierNeverBelievedFromUntrusted sends a tier header, spelled
// every way, from a peer that is not a trusted proxy: the default limit
// applies on both transports. From a trusted peer it is believed.
func TestGatewayTierNeverBelievedFromUntrusted(t *testing.T) {
	up := newRecUpstream(t, nil)
	rule := `rules:
  - name: plan
    key: [header:X-User]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
    tiers:
      header: X-Plan
      limits: {pro: {rate: 100}}
`
	spoofs := []string{
		"X-Plan: pro\r\n",
		"x-plan: pro\r\n",
		"X-PLAN:pro\r\n",
		"X-Plan:  pro \t\r\n",
		"X-Plan: pro\r\nX-Forwarded-For: 10.9.9.9\r\n",
		"X-Plan: pro\r\nX-Plan: pro\r\n", // refused 400: the rules read X-Plan
	}
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, up.URL, "client_ip: {trusted_proxies: [10.9.9.9]}\n"+rule)
			for i, h := range spoofs {
				user := "mallory" + string(rune('a'+i))
				for n := range 3 {
					resp, _ := rawGet(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nX-User: "+user+"\r\n"+h+"Connection: close\r\n")
					if n > 0 && resp.StatusCode == 200 {
						t.Errorf("%q: request %d passed: the tier was believed", h, n+1)
					}
				}
			}
			// Nor is it passed on: an upstream that reads the plan would be
			// fooled as the limit was not.
			for _, r := range up.take() {
				if vs := r.Header.Values("X-Plan"); len(vs) > 0 {
					t.Errorf("the upstream got X-Plan %q from an untrusted client", vs)
				}
			}
			trusted := startGateway(t, transport, up.URL, "client_ip: {trusted_proxies: [127.0.0.1, \"::1\"]}\n"+rule)
			for n := range 3 {
				if resp, _ := rawGet(t, trusted, "GET / HTTP/1.1\r\nHost: x\r\nX-User: carol\r\nx-plan: pro\r\nConnection: close\r\n"); resp.StatusCode != 200 {
					t.Errorf("trusted proxy, request %d: %d", n+1, resp.StatusCode)
				}
			}
			for _, r := range up.take() {
				if r.Header.Get("X-Plan") != "pro" {
					t.Errorf("the upstream did not get X-Plan from the trusted proxy: %v", r.Header)
				}
			}
		})
	}
}

// TestGatewayRefusedAndCostHeader: a rule's own refusal and a bad cost
// header are answered as the file says, on both transports.
func TestGatewayRefusedAndCostHeader(t *testing.T) {
	up := newRecUpstream(t, nil)
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, up.URL, `rules:
  - name: batch
    key: [ip]
    cost: {header: X-Batch, max: 5}
    limit: {algorithm: fixed_window, rate: 5, period: 1h}
    refused:
      status: 503
      type: https://example.com/p/busy
      detail: "{rule}: come back in {wait}s"
      hide_headers: true
`)
			resp, body := rawGet(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nX-Batch: 6\r\nContent-Length: 0\r\nConnection: close\r\n")
			if resp.StatusCode != 400 || !strings.Contains(body, "X-Batch header") {
				t.Errorf("bad cost: %d %s", resp.StatusCode, body)
			}
			if resp, _ := rawGet(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nX-Batch: 5\r\nContent-Length: 0\r\nConnection: close\r\n"); resp.StatusCode != 200 || resp.Header.Get("Ratelimit-Policy") != "" || resp.Header.Get("X-Ratelimit-Limit") != "" {
				t.Errorf("admitted: %d %v", resp.StatusCode, resp.Header)
			}
			resp, body = rawGet(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n")
			var p map[string]any
			json.Unmarshal([]byte(body), &p)
			if resp.StatusCode != 503 || p["type"] != "https://example.com/p/busy" || !strings.HasPrefix(p["detail"].(string), "batch: come back in ") || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Ratelimit-Retry-After") != "" {
				t.Errorf("refused: %d %v %s", resp.StatusCode, resp.Header, body)
			}
		})
	}
}

// TestTierHeaderDroppedKeepAlive: on one keep-alive connection from an
// untrusted client, the tier header is dropped from each request that
// carries it, a header whose name only begins like it is passed on, and
// every request is answered in turn: dropping a line leaves the next
// request's framing alone (both client paths).
func TestTierHeaderDroppedKeepAlive(t *testing.T) {
	up := newRecUpstream(t, nil)
	rule := `client_ip: {trusted_proxies: [10.9.9.9]}
rules:
  - name: plan
    key: [header:X-User]
    limit: {algorithm: fixed_window, rate: 100, period: 1h}
    tiers:
      header: X-Plan
      limits: {pro: {rate: 1000}}
`
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, up.URL, rule)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			br := bufio.NewReader(nc)
			for i, h := range []string{
				"X-Plan: pro\r\n",
				"X-Plan-Extra: keep\r\n",
				"x-plan: pro\r\nX-Plan-Extra: keep\r\n",
				"",
			} {
				io.WriteString(nc, "GET /r"+strconv.Itoa(i)+" HTTP/1.1\r\nHost: x\r\nX-User: u\r\n"+h+"\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: %d", i, resp.StatusCode)
				}
			}
			reqs := up.take()
			if len(reqs) != 4 {
				t.Fatalf("the upstream got %d requests, want 4", len(reqs))
			}
			for i, r := range reqs {
				if r.URI != "/r"+strconv.Itoa(i) {
					t.Errorf("request %d reached the upstream as %s", i, r.URI)
				}
				if vs := r.Header.Values("X-Plan"); len(vs) > 0 {
					t.Errorf("request %d: the upstream got X-Plan %q from an untrusted client", i, vs)
				}
				if want := i == 1 || i == 2; (r.Header.Get("X-Plan-Extra") == "keep") != want {
					t.Errorf("request %d: X-Plan-Extra %q", i, r.Header.Get("X-Plan-Extra"))
				}
			}
		})
	}
}
