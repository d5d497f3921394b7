package gateway

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzAdminQuery: whatever the query, state answers 200 or 400 (never a
// 5xx or a panic), an error does not echo the query at length, and a key
// holds no control character.
func FuzzAdminQuery(f *testing.F) {
	for _, seed := range []string{
		"header=X-API-Key:acme",
		"header=X-API-Key:bob&header=X-Plan:pro",
		"header=X-API-Key:a&header=X-API-Key:b",
		"header=X-Plan:pro&header=x-plan:pro&header=X-API-Key:k",
		"header=X-API-Key:%20k%09",
		"header=X-API-Key:a%0d%0aX-Plan:pro",
		"ip=192.0.2.1&method=POST&path=/a/../b&host=h:1&header=X-Other:1&header=X-Other:2",
		"ip=::ffff:10.0.0.1&header=X-API-Key:" + strings.Repeat("k", 100),
		"%zz&header",
	} {
		f.Add(seed)
	}
	g := altGateway(f, "memory://")
	h := g.adminHandler()
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest("GET", "/v1/rules/per-key/state", nil)
		r.URL.RawQuery = query
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		body := w.Body.String()
		switch {
		case w.Code != 200 && w.Code != 400:
			t.Fatalf("%q: %d %s", query, w.Code, body)
		case w.Code == 400 && len(body) > 1024:
			t.Fatalf("%q: the error has %d bytes", query, len(body))
		case w.Code == 200 && strings.ContainsFunc(body, func(c rune) bool { return c < ' ' && c != '\n' }):
			t.Fatalf("%q: a control character in %s", query, body)
		}
	})
}
