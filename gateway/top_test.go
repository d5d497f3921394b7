package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
)

// Three clients, one far over its limit: /v1/top names it first, with a
// count within the stated bound; a client's API key shows as a
// fingerprint; /v1/status counts the rule's decisions.
func TestTopClients(t *testing.T) {
	g := adminGateway(t, "")
	for ip, n := range map[string]int{"192.0.2.1": 40, "192.0.2.2": 4, "192.0.2.3": 3} {
		for range n {
			clientGet(g, ip, "/v1/x")
		}
	}
	for range 6 { // per-key allows 5: one refusal, and near its limit before
		r := httptest.NewRequest("GET", "/v2/y", nil)
		r.RemoteAddr = "192.0.2.9:4000"
		r.Header.Set("X-Tier", "gold-s3cret")
		r.Header.Set("X-API-Key", "sk_live_abc")
		g.handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	var top dashboard.TopAnswer
	adminJSON(t, g, "/v1/top?rule=per-ip&n=2", &top)
	if top.Scope != "local" || len(top.Rules) != 2 {
		t.Fatalf("top: %+v", top)
	}
	refused := top.Rules[0]
	if refused.Kind != "refused" || refused.Total != 38+2+1 || len(refused.Entries) != 2 {
		t.Fatalf("per-ip refused: %+v; want 41 refusals, 2 entries", refused)
	}
	if e := refused.Entries[0]; e.Key != "192.0.2.1" || e.Count-e.Error > 38 || e.Count < 38 || e.Error > refused.Bound {
		t.Fatalf("heaviest: %+v (bound %d); want 192.0.2.1 with 38 within its error", e, refused.Bound)
	}
	adminJSON(t, g, "/v1/top?rule=per-key", &top)
	if e := top.Rules[0].Entries; len(e) != 1 || !strings.HasPrefix(e[0].Key, "fp:") || strings.Contains(e[0].Key, "sk_live") {
		t.Fatalf("per-key refused: %+v; want one fingerprint", top.Rules[0])
	}
	if near := top.Rules[1]; near.Kind != "near" || near.Total == 0 {
		t.Fatalf("per-key near: %+v; want the requests that left under a tenth", near)
	}
	var st dashboard.Status
	adminJSON(t, g, "/v1/status", &st)
	if len(st.Rules) != 2 || st.Rules[0].Name != "per-ip" || st.Rules[0].Refused != 41 || st.Rules[0].Allowed != 6 || !st.Reload.OK || st.Reload.Time.IsZero() {
		t.Fatalf("status: %+v", st)
	}
	if w := adminDo(g, "GET", "/v1/top?rule=nope", ""); w.Code != 404 {
		t.Fatalf("unknown rule: %d", w.Code)
	}
	if w := adminDo(g, "GET", "/ui/", ""); w.Code != 200 || !strings.Contains(w.Body.String(), "<html") {
		t.Fatalf("/ui/: %d", w.Code)
	}
}

// With a token, the lists of clients need it, reads protected or not;
// the status needs it only with protect_reads.
func TestTopClientsNeedTheToken(t *testing.T) {
	for _, c := range []struct {
		admin      string
		statusCode int
	}{
		{"admin: {token_file: TOKEN, protect_reads: true}", 401},
		{"admin: {token_file: TOKEN, reset: true}", 200},
	} {
		g := adminGateway(t, c.admin)
		if w := adminDo(g, "GET", "/v1/top", ""); w.Code != 401 {
			t.Fatalf("%s: /v1/top without the token: %d, want 401", c.admin, w.Code)
		}
		if w := adminDo(g, "GET", "/v1/top", adminToken); w.Code != 200 {
			t.Fatalf("%s: /v1/top with the token: %d", c.admin, w.Code)
		}
		if w := adminDo(g, "GET", "/v1/status", ""); w.Code != c.statusCode {
			t.Fatalf("%s: /v1/status without the token: %d, want %d", c.admin, w.Code, c.statusCode)
		}
		if w := adminDo(g, "GET", "/ui/", ""); w.Code != 200 {
			t.Fatalf("%s: the page itself: %d, want 200 (it holds no data)", c.admin, w.Code)
		}
	}
}

func adminJSON(t *testing.T, g *Gateway, target string, v any) {
	t.Helper()
	w := adminDo(g, "GET", target, "")
	if w.Code != 200 {
		t.Fatalf("%s: %d %s", target, w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		t.Fatal(err)
	}
}
