package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// altGateway is a gateway on store (a URL) whose rule per-key gives acme
// an override of 3 and the tier pro 2, where anyone else gets 1.
func altGateway(t testing.TB, store string) *Gateway {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	return newTestGateway(t, `upstream: builtin:demo
admin: {reset: true, token_file: `+tok+`}
store: {url: "`+store+`"}
client_ip: {trusted_proxies: [10.0.0.0/8]}
rules:
  - name: per-key
    key: ["header:X-API-Key"]
    on_missing_key: skip
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
    overrides:
      acme: {rate: 3}
    tiers:
      header: X-Plan
      limits:
        pro: {rate: 2}
`)
}

// altGet sends a request with X-API-Key key through the gateway, with
// X-Plan plan from a trusted proxy when plan is not empty.
func altGet(g *Gateway, key, plan string) int {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.9:4000"
	r.Header.Set("X-API-Key", key)
	if plan != "" {
		r.RemoteAddr = "10.0.0.1:4000"
		r.Header.Set("X-Forwarded-For", "192.0.2.9")
		r.Header.Set("X-Plan", plan)
	}
	w := httptest.NewRecorder()
	g.handler.ServeHTTP(w, r)
	return w.Code
}

func adminStateOf(t *testing.T, g *Gateway, method, target string) AdminState {
	t.Helper()
	w := adminDo(g, method, target, adminToken)
	if w.Code != 200 {
		t.Fatalf("%s %s: %d %s", method, target, w.Code, w.Body)
	}
	var st AdminState
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// The admin's state and reset build the key a request gets, an override's
// or a tier's included: a client refused under its override or tier is
// shown with that limit, and a reset lets its next request through.
func TestAdminStateAndResetOverrideAndTier(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"memory": func(*testing.T) string { return "memory://" },
		"redis":  func(t *testing.T) string { return redistest.Server(t) },
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			g := altGateway(t, store(t))
			for _, tc := range []struct {
				who, key, plan, query string
				limit                 int
			}{
				{"override", "acme", "", "header=X-API-Key:acme", 3},
				{"tier", "bob", "pro", "header=X-API-Key:bob&header=X-Plan:pro", 2},
				{"rule", "carol", "", "header=X-API-Key:carol", 1},
			} {
				for i := range tc.limit {
					if got := altGet(g, tc.key, tc.plan); got != 200 {
						t.Fatalf("%s: request %d: %d, want 200", tc.who, i, got)
					}
				}
				if got := altGet(g, tc.key, tc.plan); got != 429 {
					t.Fatalf("%s: request %d: %d, want 429", tc.who, tc.limit, got)
				}
				st := adminStateOf(t, g, "GET", "/v1/rules/per-key/state?"+tc.query)
				if st.Allowed == nil || *st.Allowed || st.Limit != tc.limit || st.Remaining != 0 || st.RetryAfter <= 0 {
					t.Errorf("%s: state %+v, want refused, limit %d, remaining 0", tc.who, st, tc.limit)
				}
				if st.Override != (tc.who == "override") || st.Tier != tc.plan {
					t.Errorf("%s: state %+v names another limit", tc.who, st)
				}
				st = adminStateOf(t, g, "POST", "/v1/rules/per-key/reset?"+tc.query)
				if !st.Reset || st.Allowed == nil || !*st.Allowed || st.Limit != tc.limit || st.Remaining != tc.limit {
					t.Errorf("%s: reset %+v, want the state after it: allowed, limit and remaining %d", tc.who, st, tc.limit)
				}
				if got := altGet(g, tc.key, tc.plan); got != 200 {
					t.Errorf("%s: after the reset: %d, want 200", tc.who, got)
				}
			}
		})
	}
}

// A header the rules read, given twice, is refused by the admin query as
// the gateway refuses a request that carries it twice; one they do not
// read may repeat in both.
func TestAdminRepeatedHeaderAgreesWithGateway(t *testing.T) {
	g := altGateway(t, "memory://")
	for _, tc := range []struct {
		name   string
		values []string
		want   int
	}{
		{"X-API-Key", []string{"a", "b"}, 400},
		{"X-API-Key", []string{"a", "a"}, 400},
		{"X-Plan", []string{"pro", "pro"}, 400},
		{"X-Other", []string{"a", "b"}, 200},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:4000"
		r.Header.Set("X-API-Key", "k")
		r.Header.Del(tc.name)
		query := "header=X-API-Key:k"
		if tc.name == "X-API-Key" {
			query = ""
		}
		for _, v := range tc.values {
			r.Header.Add(tc.name, v)
			query += "&header=" + tc.name + ":" + v
		}
		w := httptest.NewRecorder()
		g.handler.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("gateway, %s twice: %d, want %d", tc.name, w.Code, tc.want)
		}
		w = adminDo(g, "GET", "/v1/rules/per-key/state?"+query, "")
		if w.Code != tc.want {
			t.Errorf("admin, %s twice: %d %s, want %d", tc.name, w.Code, w.Body, tc.want)
		}
		if tc.want == 400 && !strings.Contains(w.Body.String(), "header "+http.CanonicalHeaderKey(tc.name)+" is given 2 times") {
			t.Errorf("admin, %s twice: %s, want a message naming it", tc.name, w.Body)
		}
	}
}
