package gateway

import (
	"fmt"
	"testing"
)

// Hop-by-hop headers: the rules read a request as the upstream receives
// it, after every hop-by-hop removal. A header the client names in
// Connection is gone before any rule reads it.

// TestHopConnectionNamesKeyHeader: twenty fresh API keys, each named in
// Connection so that the upstream never sees it, are twenty anonymous
// requests, limited by IP after 3, on every transport.
func TestHopConnectionNamesKeyHeader(t *testing.T) {
	const rule = `rules:
  - name: per-key
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
`
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, rule)
			passed := 0
			for i := range 20 {
				resp, _ := rawExchange(t, addr, fmt.Sprintf("GET /k HTTP/1.1\r\nHost: gw.test\r\nX-API-Key: r%d\r\nConnection: X-API-Key\r\n\r\n", i))
				if resp.StatusCode == 200 {
					passed++
				}
			}
			if passed != 3 {
				t.Errorf("%d of 20 passed, want 3: the rule counted keys the upstream never saw", passed)
			}
			for _, r := range up.take() {
				if v := r.Header.Get("X-Api-Key"); v != "" {
					t.Errorf("the upstream got X-API-Key %q", v)
				}
			}
		})
	}
}

// TestHopConnectionNamesCostHeader: a batch size named in Connection is
// dropped before the upstream, which then works on its default batch (5):
// the rule charges that default, not the 1 the client wrote.
func TestHopConnectionNamesCostHeader(t *testing.T) {
	const rule = `rules:
  - name: batch
    key: [ip]
    cost: {header: X-Batch-Size, max: 5, default: 5}
    limit: {algorithm: fixed_window, rate: 10, period: 1h}
`
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, rule)
			passed := 0
			for range 10 {
				resp, _ := rawExchange(t, addr, "POST /b HTTP/1.1\r\nHost: gw.test\r\nX-Batch-Size: 1\r\nConnection: X-Batch-Size\r\nContent-Length: 0\r\n\r\n")
				if resp.StatusCode == 200 {
					passed++
				}
			}
			if passed != 2 {
				t.Errorf("%d batches passed, want 2 of the upstream's default size 5", passed)
			}
			for _, r := range up.take() {
				if v := r.Header.Get("X-Batch-Size"); v != "" {
					t.Errorf("the upstream got X-Batch-Size %q", v)
				}
			}
		})
	}
}

// TestHopProxyAuthorizationKey: Proxy-Authorization is the gateway's, not
// the upstream's (ReverseProxy removes it; the fast path does not forward
// it): a rule keyed on it sees no key, and limits by IP.
func TestHopProxyAuthorizationKey(t *testing.T) {
	const rule = `rules:
  - name: per-proxy-user
    key: [header:Proxy-Authorization]
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
`
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, nil)
			addr := startVia(t, tr, up.URL, rule)
			passed := 0
			for i := range 20 {
				resp, _ := rawExchange(t, addr, fmt.Sprintf("GET /k HTTP/1.1\r\nHost: gw.test\r\nProxy-Authorization: Basic r%d\r\n\r\n", i))
				if resp.StatusCode == 200 {
					passed++
				}
			}
			if passed != 3 {
				t.Errorf("%d of 20 passed, want 3: the rule counted keys the upstream never saw", passed)
			}
			for _, r := range up.take() {
				if v := r.Header.Get("Proxy-Authorization"); v != "" {
					t.Errorf("the upstream got Proxy-Authorization %q", v)
				}
			}
		})
	}
}
