package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A concurrency rule keeps slots, not a counter: GET /v1/rules lists its
// max and ttl (not a rate limit without an algorithm), and its state and
// reset answer 400 saying so, rather than 500 from building a rate
// limiter of its empty limit.
func TestAdminConcurrencyRule(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, `upstream: builtin:demo
admin: {reset: true, token_file: `+tok+`}
rules:
  - name: cc
    key: [ip]
    concurrency: {max: 3, ttl: 9s}
`)
	w := adminDo(g, "GET", "/v1/rules", "")
	var out AdminRules
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if c := out.Rules[0].Concurrency; c == nil || c.Max != 3 || c.TTL != 9 || out.Rules[0].Limit != nil {
		t.Errorf("listing: %s", w.Body)
	}
	for _, m := range []string{"GET /v1/rules/cc/state?ip=1.2.3.4", "POST /v1/rules/cc/reset?ip=1.2.3.4"} {
		method, target, _ := strings.Cut(m, " ")
		if w := adminDo(g, method, target, adminToken); w.Code != 400 || !strings.Contains(w.Body.String(), "in flight") {
			t.Errorf("%s: %d %s", m, w.Code, w.Body)
		}
	}
}
