package gateway

import (
	"fmt"
	"golang.org/x/net/http2"
	"strings"
	"testing"
)

// Found in review: over_limit's header over client_h2: frames. The relay
// must send the upstream the header the middleware set on the request,
// as every other transport does (TestOverLimitForwardHeader).
func TestH2FramesOverLimitForwardHeader(t *testing.T) {
	want := []string{"", "", "monthly", "monthly, daily", "monthly, daily"}
	up := newRecUpstream(t, nil)
	addr := startFrames(t, up.URL, forwardRules)
	c := dialH2C(t, addr)
	for i := range 6 {
		a := c.get(h2get(fmt.Sprintf("/f/%d", i), "x-quota-exceeded", "forged")...)
		wantStatus := 200
		if i == 5 {
			wantStatus = 429
		}
		if a.status != wantStatus {
			t.Fatalf("request %d: %s, want %d", i+1, a, wantStatus)
		}
	}
	got := up.take()
	if len(got) != len(want) {
		t.Fatalf("the upstream got %d requests, want %d", len(got), len(want))
	}
	for i, r := range got {
		if vs := r.Header.Values("X-Quota-Exceeded"); strings.Join(vs, "|") != want[i] {
			t.Errorf("request %d (%s): X-Quota-Exceeded %q, want %q", i+1, r.URI, vs, want[i])
		}
	}
}

// Found in review: an upstream's chunked trailers over client_h2: frames.
// Fields HTTP/2 forbids (RFC 9113, 8.2.2) or a trailer may not carry are
// dropped, as net/http's server drops them (httpguts.ValidTrailerHeader,
// which keeps Upgrade): passed on, they make the response malformed.
func TestH2FramesUpstreamTrailersFiltered(t *testing.T) {
	up := newRawUpstream(t)
	up.raw = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n" +
		"Connection: close\r\nTransfer-Encoding: chunked\r\nKeep-Alive: 1\r\nUpgrade: x\r\nTE: trailers\r\nContent-Length: 99\r\nHost: evil\r\nX-T: 1\r\n\r\n")
	addr := startFrames(t, up.url, "rules: []\n")
	c := dialH2C(t, addr)
	id := c.open(true, h2get("/x")...)
	var blocks [][]string
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %q: %v", blocks, err)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == id {
			var names []string
			for _, hf := range h.RegularFields() {
				names = append(names, hf.Name)
			}
			blocks = append(blocks, names)
		}
		c.handle(f)
		if c.answers[id].done {
			break
		}
	}
	if len(blocks) != 2 {
		t.Fatalf("header blocks %q, want a head and trailers", blocks)
	}
	if got := strings.Join(blocks[1], ","); got != "x-t" {
		t.Errorf("trailers %q, want only x-t", got)
	}
}
