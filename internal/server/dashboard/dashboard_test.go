package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
)

// TestHandler checks each path's answer, without a browser.
func TestHandler(t *testing.T) {
	top := func(_ context.Context, q dashboard.TopQuery) (dashboard.TopAnswer, error) {
		if q.Rule == "nope" {
			return dashboard.TopAnswer{}, fmt.Errorf("rule %q: %w", q.Rule, dashboard.ErrUnknownRule)
		}
		return dashboard.TopAnswer{Scope: q.Scope, Span: q.Span}, nil
	}
	status := func(context.Context) (dashboard.Status, error) {
		return dashboard.Status{Rules: []dashboard.RuleStatus{{Name: "r", Allowed: 3}}}, nil
	}
	authorize := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer t" {
			http.Error(w, "no", http.StatusUnauthorized)
			return false
		}
		return true
	}
	guarded := dashboard.New(status, top, dashboard.WithAuthorize(authorize))
	open := dashboard.New(status, nil)

	for _, tc := range []struct {
		h          http.Handler
		method     string
		target     string
		auth       bool
		code       int
		typ, wants string // the Content-Type's start; what the body holds
	}{
		{guarded, "GET", "/ui/", false, 200, "text/html", "app.js"},
		{guarded, "GET", "/ui/app.js", false, 200, "text/javascript", "textContent"},
		{guarded, "GET", "/ui/app.css", false, 200, "text/css", "body"},
		{guarded, "GET", "/ui", false, 301, "", ""},
		{guarded, "GET", "/ui/other", false, 404, "", ""},
		{guarded, "POST", "/ui/", false, 405, "", ""},
		{guarded, "GET", "/v1/status", false, 401, "", ""},
		{guarded, "GET", "/v1/status", true, 200, "application/json", `"allowed":3`},
		{guarded, "GET", "/v1/top", false, 401, "", ""},
		{guarded, "GET", "/v1/top", true, 200, "application/json", `{"scope":"local","span":"1m","rules":null}`},
		{guarded, "GET", "/v1/top?span=1h&scope=fleet&n=1000", true, 200, "application/json", `"scope":"fleet","span":"1h"`},
		{guarded, "GET", "/v1/top?n=0", true, 400, "application/json", `"error":"n: \"0\" is not`},
		{guarded, "GET", "/v1/top?n=1001", true, 400, "application/json", "is not a whole number"},
		{guarded, "GET", "/v1/top?span=5m", true, 400, "application/json", "span"},
		{guarded, "GET", "/v1/top?scope=world", true, 400, "application/json", "scope"},
		{guarded, "GET", "/v1/top?rule=nope", true, 404, "application/json", `unknown rule`},
		{open, "GET", "/v1/status", false, 200, "application/json", `"name":"r"`},
		{open, "GET", "/v1/top", false, 404, "", ""},
	} {
		req := httptest.NewRequest(tc.method, tc.target, nil)
		if tc.auth {
			req.Header.Set("Authorization", "Bearer t")
		}
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, req)
		name := tc.method + " " + tc.target
		if rec.Code != tc.code {
			t.Errorf("%s (token %v): %d, want %d", name, tc.auth, rec.Code, tc.code)
			continue
		}
		if typ := rec.Header().Get("Content-Type"); !strings.HasPrefix(typ, tc.typ) {
			t.Errorf("%s: Content-Type %q, want %q", name, typ, tc.typ)
		}
		if !strings.Contains(rec.Body.String(), tc.wants) {
			t.Errorf("%s: body %q does not hold %q", name, rec.Body.String(), tc.wants)
		}
		if strings.HasPrefix(tc.target, "/ui/") && rec.Code == 200 &&
			!strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s: no Content-Security-Policy", name)
		}
		if rec.Code == 200 && strings.HasPrefix(tc.typ, "application/json") && !json.Valid(rec.Body.Bytes()) {
			t.Errorf("%s: not JSON: %s", name, rec.Body.String())
		}
	}
}
