package h1

import (
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/rules"
)

// TestClientIPHeadersAgree: the fast path's switch and the rules' list
// name the same headers.
func TestClientIPHeadersAgree(t *testing.T) {
	for _, h := range rules.ClientAddressHeaders() {
		if !isClientIPHeader(strings.ToLower(h)) {
			t.Errorf("%s: not dropped by the fast path", h)
		}
	}
	n := 0
	for _, h := range []string{"x-real-ip", "true-client-ip", "x-client-ip", "client-ip", "x-cluster-client-ip", "cf-connecting-ip", "fastly-client-ip", "x-forwarded-for", "x-user-id"} {
		if isClientIPHeader(h) {
			n++
		}
	}
	if n != len(rules.ClientAddressHeaders()) {
		t.Errorf("the fast path drops %d client-address headers, the rules list %d", n, len(rules.ClientAddressHeaders()))
	}
}
