package gateway

import "testing"

// TestAbsentHeadersOnEveryTransport checks that a rule for anonymous
// clients (match.absent_headers) counts the requests without the header,
// and only those, on both client paths.
func TestAbsentHeadersOnEveryTransport(t *testing.T) {
	up := newRecUpstream(t, defaultReply)
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			addr := startVia(t, tr, up.URL, `rules:
  - name: anonymous
    match: {absent_headers: [X-API-Key]}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
			for i, c := range []struct {
				raw  string
				want int
			}{
				{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", 200},
				{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", 429},
				{"GET /a HTTP/1.1\r\nHost: x\r\nX-API-Key:\r\n\r\n", 429},
				{"GET /a HTTP/1.1\r\nHost: x\r\nx-api-key: k1\r\n\r\n", 200},
				{"GET /a HTTP/1.1\r\nHost: x\r\nX-API-Key: k1\r\n\r\n", 200},
			} {
				if res, _ := rawExchange(t, addr, c.raw); res.StatusCode != c.want {
					t.Errorf("request %d: %d, want %d", i, res.StatusCode, c.want)
				}
			}
		})
	}
}
