package gateway

import (
	"fmt"
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
