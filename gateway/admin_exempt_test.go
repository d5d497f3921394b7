package gateway

import (
	"net/http/httptest"
	"testing"
)

// TestAdminIPZoneIsTheRequestsKey: an IPv6 address with a zone
// (fe80::1%eth0) is the client fe80::1 on the request path, which drops
// zones; the admin's ip= is keyed the same, so that a zone (which may hold
// braces, a Redis hash tag) never makes a key no request has.
func TestAdminIPZoneIsTheRequestsKey(t *testing.T) {
	g := newTestGateway(t, `upstream: builtin:demo
client_ip: {ipv6_prefix: 128}
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[fe80::1%eth0]:4000"
	w := httptest.NewRecorder()
	g.handler.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("the client's request: %d", w.Code)
	}
	want := adminStateOf(t, g, "GET", "/v1/rules/per-ip/state?ip=fe80::1")
	for _, ip := range []string{"fe80::1%25eth0", "fe80::1%25%7Bx%7D"} {
		st := adminStateOf(t, g, "GET", "/v1/rules/per-ip/state?ip="+ip)
		if st.Key != want.Key || *st.Allowed {
			t.Errorf("ip=%s: key %q allowed %v, want the request's key %q, refused", ip, st.Key, *st.Allowed, want.Key)
		}
	}
}

// TestAdminExemptOrDeniedClientIsNotMatched: a client on access.allow is
// limited by no rule, and one on access.deny is refused before any: the
// admin's state says the rule does not cover it (matches false), as the
// request path has it, rather than showing a counter its requests never
// touch.
func TestAdminExemptOrDeniedClientIsNotMatched(t *testing.T) {
	g := newTestGateway(t, `upstream: builtin:demo
access: {allow: [192.0.2.0/24], deny: [198.51.100.0/24]}
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.7:4000"
		w := httptest.NewRecorder()
		g.handler.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("an exempt client's request: %d", w.Code)
		}
	}
	for _, ip := range []string{"192.0.2.7", "198.51.100.7"} {
		if st := adminStateOf(t, g, "GET", "/v1/rules/per-ip/state?ip="+ip); st.Matches {
			t.Errorf("ip=%s: matches, but no rule covers it on the request path", ip)
		}
	}
	if st := adminStateOf(t, g, "GET", "/v1/rules/per-ip/state?ip=203.0.113.7"); !st.Matches {
		t.Errorf("ip=203.0.113.7: does not match, want it covered")
	}
}
