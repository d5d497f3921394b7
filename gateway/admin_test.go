package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const adminToken = "0123456789abcdef0123456789"

// adminGateway builds a gateway from rules and an admin section, in which
// TOKEN stands for the path of a file holding adminToken.
func adminGateway(t *testing.T, admin string) *Gateway {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin = strings.ReplaceAll(admin, "TOKEN", tok)
	return newTestGateway(t, `upstream: builtin:demo
`+admin+`
rules:
  - name: per-ip
    match: {path_prefix: /v1}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
  - name: per-key
    match: {headers: {X-Tier: gold-s3cret}}
    key: ["header:X-API-Key"]
    on_missing_key: skip
    limit: {algorithm: token_bucket, rate: 5, period: 1m}
`)
}

// adminDo serves one admin request.
func adminDo(g *Gateway, method, target, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	g.adminHandler().ServeHTTP(w, r)
	return w
}

// clientGet sends a client request through the gateway from ip.
func clientGet(g *Gateway, ip, path string) int {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = ip + ":4000"
	w := httptest.NewRecorder()
	g.handler.ServeHTTP(w, r)
	return w.Code
}

func state(t *testing.T, g *Gateway, query string) AdminState {
	t.Helper()
	w := adminDo(g, "GET", "/v1/rules/per-ip/state?"+query, "")
	if w.Code != 200 {
		t.Fatalf("state?%s: %d %s", query, w.Code, w.Body)
	}
	var st AdminState
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestAdminStateAndReset(t *testing.T) {
	g := adminGateway(t, "admin: {reset: true, token_file: TOKEN}")
	for i, want := range []int{200, 200, 429} {
		if got := clientGet(g, "192.0.2.1", "/v1/x"); got != want {
			t.Fatalf("request %d: %d, want %d", i, got, want)
		}
	}
	clientGet(g, "192.0.2.2", "/v1/x")

	st := state(t, g, "ip=192.0.2.1&path=/v1/x")
	if *st.Allowed || st.Remaining != 0 || st.RetryAfter <= 0 || !st.Matches || !strings.HasPrefix(st.Key, "per-ip:") {
		t.Fatalf("spent client: %+v", st)
	}
	if again := state(t, g, "ip=192.0.2.1&path=/v1/x"); again.Remaining != 0 || *again.Allowed {
		t.Fatalf("a peek took something: %+v", again)
	}
	if st := state(t, g, "ip=192.0.2.2"); !*st.Allowed || st.Remaining != 1 || st.Matches {
		t.Fatalf("other client (path / does not match): %+v", st)
	}

	for _, tok := range []string{"", "wrong-token-wrong-token"} {
		if w := adminDo(g, "POST", "/v1/rules/per-ip/reset?ip=192.0.2.1", tok); w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("token %q: %d %s", tok, w.Code, w.Body)
		}
	}
	if w := adminDo(g, "POST", "/v1/rules/per-ip/reset?ip=192.0.2.1", adminToken); w.Code != 200 || !strings.Contains(w.Body.String(), `"reset": true`) {
		t.Fatalf("reset: %d %s", w.Code, w.Body)
	}
	if got := clientGet(g, "192.0.2.1", "/v1/x"); got != 200 {
		t.Fatalf("after reset: %d, want 200", got)
	}
	if st := state(t, g, "ip=192.0.2.2"); st.Remaining != 1 {
		t.Fatalf("another client's counter changed with the reset: %+v", st)
	}
	if n := counter(t, g, "ratekeeper_admin_unauthorized_total"); n != 2 {
		t.Fatalf("ratekeeper_admin_unauthorized_total = %v, want the two refused resets", n)
	}
}

// counter reads a counter of the gateway's registry.
func counter(t *testing.T, g *Gateway, name string) float64 {
	t.Helper()
	mfs, err := g.proc.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestAdminResetDisabled(t *testing.T) {
	g := adminGateway(t, "")
	if w := adminDo(g, "POST", "/v1/rules/per-ip/reset?ip=192.0.2.1", adminToken); w.Code != 404 || !strings.Contains(w.Body.String(), "admin.reset") {
		t.Fatalf("reset off: %d %s", w.Code, w.Body)
	}
	if w := adminDo(g, "GET", "/v1/rules/per-ip/reset?ip=192.0.2.1", ""); w.Code != 405 {
		t.Fatalf("GET reset: %d", w.Code)
	}
	if w := adminDo(g, "GET", "/v1/rules", ""); w.Code != 200 {
		t.Fatalf("reads stay open: %d", w.Code)
	}
}

func TestAdminProtectReads(t *testing.T) {
	g := adminGateway(t, "admin: {protect_reads: true, token_file: TOKEN}")
	if w := adminDo(g, "GET", "/v1/rules", ""); w.Code != 401 {
		t.Fatalf("without the token: %d", w.Code)
	}
	if w := adminDo(g, "GET", "/v1/rules/per-ip/state?ip=192.0.2.1", "nope-nope-nope-nope"); w.Code != 401 {
		t.Fatalf("wrong token: %d", w.Code)
	}
	if w := adminDo(g, "GET", "/v1/rules", adminToken); w.Code != 200 {
		t.Fatalf("with the token: %d", w.Code)
	}
	if w := adminDo(g, "POST", "/v1/rules/per-ip/reset?ip=192.0.2.1", adminToken); w.Code != 404 {
		t.Fatalf("reset still off: %d", w.Code)
	}
}

// The listing redacts the store's password and rules' header values.
func TestAdminRulesRedacted(t *testing.T) {
	g := newTestGateway(t, `upstream: builtin:demo
store: {url: "redis://:hunter2-redis-pw@127.0.0.1:1/0", timeout: 10ms}
rules:
  - name: gold
    match: {headers: {X-Internal-Token: tok-s3cret-value, X-Present: "*"}, absent_headers: [X-API-Key]}
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
`)
	w := adminDo(g, "GET", "/v1/rules", "")
	body := w.Body.String()
	if w.Code != 200 || strings.Contains(body, "hunter2") || strings.Contains(body, "s3cret") {
		t.Fatalf("%d\n%s", w.Code, body)
	}
	var out AdminRules
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	r := out.Rules[0]
	if out.File != g.path || r.Name != "gold" || r.Match.Headers["X-Internal-Token"] != "<redacted>" || r.Match.Headers["X-Present"] != "*" ||
		len(r.Match.AbsentHeaders) != 1 || r.Match.AbsentHeaders[0] != "X-API-Key" || r.Limit.Algorithm != "fixed_window" || r.Limit.Rate != 2 || r.Key[0] != "global" || r.Mode != "enforce" || !strings.Contains(out.Store, "127.0.0.1:1") {
		t.Fatalf("%+v", out)
	}
}

func TestAdminBadQueries(t *testing.T) {
	g := adminGateway(t, "admin: {reset: true, token_file: TOKEN}")
	huge := strings.Repeat("a", 5000)
	for _, tc := range []struct{ target, want string }{
		{"/v1/rules/per-ip/state?ip=" + huge, "at most"},
		{"/v1/rules/per-ip/state?ip=1.2.3.4&header=" + strings.Repeat("X-A:b&header=", 800), "at most"},
		{"/v1/rules/per-ip/state?ip=999.1.1.1", "not an IP address"},
		{"/v1/rules/per-ip/state?ip=1.2.3.4&ip=1.2.3.5", "once at most"},
		{"/v1/rules/per-ip/state", "give ip="},
		{"/v1/rules/per-ip/state?ip=1.2.3.4&bogus=1", "not a parameter"},
		{"/v1/rules/per-ip/state?ip=1.2.3.4&method=G%20T", "not an HTTP method"},
		{"/v1/rules/per-ip/state?ip=1.2.3.4&host=a%0d%0ab", "not a host"},
		{"/v1/rules/per-ip/state?ip=1.2.3.4&path=v1", "does not start with /"},
		{"/v1/rules/per-ip/state?ip=1.2.3.4&path=/a%252Fb", "would refuse"},
		{"/v1/rules/per-ip/state?ip=1.2.3.4&%zz", "malformed"},
		{"/v1/rules/per-key/state?header=X-API-Key:a%0d%0aSet-Cookie:x", "control character"},
		{"/v1/rules/per-key/state?header=X-API-Key:a%00", "control character"},
		{"/v1/rules/per-key/state?header=Bad%20Name:a", "not a header name"},
		{"/v1/rules/per-key/state?header=novalue", "not Name:value"},
		{"/v1/rules/per-key/state?header=X-API-Key:a%20", "white space"},
		{"/v1/rules/per-key/state", "does not apply"},
	} {
		w := adminDo(g, "GET", tc.target, "")
		if w.Code != 400 || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%.100s: %d %s (want 400 saying %q)", tc.target, w.Code, w.Body, tc.want)
		}
		if len(w.Body.String()) > 1024 {
			t.Errorf("%.100s: the error echoes %d bytes", tc.target, len(w.Body.String()))
		}
	}
	if w := adminDo(g, "GET", "/v1/rules/"+url.PathEscape(huge)+"/state?ip=1.2.3.4", ""); w.Code != 404 || len(w.Body.String()) > 1024 {
		t.Errorf("unknown rule: %d %.200s", w.Code, w.Body)
	}
	if w := adminDo(g, "GET", "/v1/rules/per-key/state?header=X-API-Key:%20k1", ""); w.Code != 200 || !strings.Contains(w.Body.String(), `"remaining": 5`) {
		t.Errorf("per-key: %d %s", w.Code, w.Body)
	}
}

func TestAdminConfigProblems(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"admin:\n  reset: true\n", "f.yaml:3: admin.reset: needs a bearer token"},
		{"admin:\n  protect_reads: true\n", "f.yaml:3: admin.protect_reads: needs a bearer token"},
		{"admin:\n  reset: true\n  token_file: /nonexistent/token\n", "f.yaml:4: admin.token_file:"},
		{"admin:\n  reset: true\n  token_env: RK_TEST_SURELY_UNSET\n", "f.yaml:4: admin.token_env: the environment variable RK_TEST_SURELY_UNSET is not set"},
		{"admin:\n  token_file: a\n  token_env: B\n", "f.yaml:4: admin.token_env: the token is given twice"},
		{"admin:\n  token: abc\n", "f.yaml:3: admin.token: unknown field"},
	} {
		_, err := Parse("f.yaml", []byte("upstream: builtin:demo\n"+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
