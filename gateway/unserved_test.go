package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// unservedRules reserve a request's max_tokens and settle to the usage
// its response reports, default 500.
const unservedRules = `rules:
  - name: tpd
    key: [header:Authorization]
    cost:
      response_json: usage.total_tokens
      max: 32000
      default: 500
      reserve: {request_json: max_tokens, default: 4000}
    limit: {algorithm: token_bucket, rate: 100000, period: 24h}
`

// remainingOf is a response's X-RateLimit-Remaining.
func remainingOf(t *testing.T, resp *http.Response) int {
	t.Helper()
	n, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining"))
	if err != nil {
		t.Fatalf("X-RateLimit-Remaining %q: %v", resp.Header.Get("X-RateLimit-Remaining"), err)
	}
	return n
}

// TestUnservedCostsDefault: the gateway's own answers, which the upstream
// never gave, settle at the rule's default, not at the request's
// reserve: three 502s from an unreachable upstream cost 3×500, not
// 3×32000, and so does a 400 for a body shorter than its Content-Length.
func TestUnservedCostsDefault(t *testing.T) {
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, "http://127.0.0.1:1", unservedRules)
			for range 3 {
				if resp := postChat(t, addr, "k", "/v1/chat", []byte(`{"max_tokens":32000}`)); resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("an unreachable upstream: %d, want 502", resp.StatusCode)
				}
			}
			// The probe reserves 1; the refill meanwhile is about 1 a second.
			resp := postChat(t, addr, "k", "/v1/chat", []byte(`{"max_tokens":1}`))
			if n, want := remainingOf(t, resp), 100000-3*500-1; n < want || n > want+100 {
				t.Errorf("remaining %d after three 502s that reserved 32000 each, want %d (each costs the default, 500)", n, want)
			}

			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(20 * time.Second)) // against a hang, not a wait
			io.WriteString(nc, "POST /v1/chat HTTP/1.1\r\nHost: gw.test\r\nAuthorization: Bearer short\r\nContent-Length: 100\r\n\r\n{\"max_tokens\":32000}")
			nc.(*net.TCPConn).CloseWrite()
			if resp, err := http.ReadResponse(bufio.NewReader(nc), nil); err == nil && resp.StatusCode != http.StatusBadRequest {
				t.Errorf("a short body: %d, want 400", resp.StatusCode)
			} else if err != nil && transport == "standard" {
				t.Errorf("a short body: no answer: %v", err)
			}
			// The fast path closes a connection whose body it could not
			// hand over whole: then nothing was taken.
			resp = postChat(t, addr, "short", "/v1/chat", []byte(`{"max_tokens":1}`))
			if n, least := remainingOf(t, resp), 100000-500-1; n < least {
				t.Errorf("remaining %d after a short body, want at least %d (the default, 500, and the probe's 1)", n, least)
			}
		})
	}
}

// TestTimedOutKeepsReserve: an upstream that got the request but did not
// answer in time (response_header) may be working on it still, so the
// 502 keeps the request's reserve; only a request that never reached the
// upstream costs the default.
func TestTimedOutKeepsReserve(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // read, never answered
		}
	}()
	defer func() {
		for len(held) > 0 {
			(<-held).Close()
		}
	}()
	rules := "upstream_timeouts: {response_header: 300ms}\n" + unservedRules
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, "http://"+ln.Addr().String(), rules)
			if resp := postChat(t, addr, "k", "/v1/chat", []byte(`{"max_tokens":32000}`)); resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("an upstream that does not answer: %d, want 502", resp.StatusCode)
			}
			resp := postChat(t, addr, "k", "/v1/chat", []byte(`{"max_tokens":1}`))
			if n, most := remainingOf(t, resp), 100000-32000-1+100; n > most {
				t.Errorf("remaining %d after a 502 whose request reached the upstream, want at most %d (it keeps its reserve, 32000)", n, most)
			}
		})
	}
}
