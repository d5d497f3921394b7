package rules

import (
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
)

// A POST's method override that names no HTTP method is served as a POST
// by every upstream, so it is counted as one: else a client writing
// "X-HTTP-Method-Override: A1", "A2"... gets a fresh key under each
// rule keyed by method or route, and no limit at all.
func TestUnknownMethodOverrideCountsAsPost(t *testing.T) {
	c, err := Parse("k.yaml", []byte(`rules:
  - {name: route, key: [ip, route], limit: {algorithm: fixed_window, rate: 1, period: 1s}}
  - {name: method, key: [ip, method], limit: {algorithm: fixed_window, rate: 1, period: 1s}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("192.0.2.1")
	for _, rl := range s.Rules {
		plain, _ := rl.Key(httptest.NewRequest("POST", "/login", nil), ip)
		keys := map[string]bool{}
		for n := range 50 {
			r := httptest.NewRequest("POST", "/login", nil)
			r.Header.Set("X-Http-Method-Override", "A"+strconv.Itoa(n))
			k, _ := rl.Key(r, ip)
			keys[k] = true
		}
		if len(keys) != 1 || !keys[plain] {
			t.Errorf("%s: 50 unknown overrides made %d keys; want the POST's one", rl.Name, len(keys))
		}
		r := httptest.NewRequest("POST", "/login", nil)
		r.Header.Set("X-Http-Method-Override", "delete")
		if k, _ := rl.Key(r, ip); k == plain {
			t.Errorf("%s: an override to DELETE counts as the POST", rl.Name)
		}
	}
}
