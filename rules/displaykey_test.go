package rules

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// A key shows as its parts: the address masked, header values as
// fingerprints unless show_key, whatever limit (override, tier) built it.
func TestDisplayKey(t *testing.T) {
	set := mustCompile(t, `
client_ip: {ipv6_prefix: 64}
rules:
  - name: per-key
    key: [ip, header:X-API-Key]
    limit: {algorithm: token_bucket, rate: 10, period: 1m}
    overrides: {}
  - name: shown
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 10, period: 1m}
    show_key: true
  - name: uploads
    key: [header:X-API-Key]
    concurrency: {max: 2}
`)
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "sk_live_secret")
	ms := set.Match(nil, r, netip.MustParseAddr("2001:db8::1234"))
	got := map[string]string{}
	for _, m := range ms {
		got[m.Rule.Name] = m.Rule.DisplayKey(m.Key)
	}
	fp := Fingerprint("sk_live_secret")
	if got["per-key"] != "2001:db8::/64|"+fp {
		t.Errorf("per-key shows %q, want the masked address and %s", got["per-key"], fp)
	}
	if got["shown"] != "sk_live_secret" {
		t.Errorf("shown shows %q, want the value (show_key)", got["shown"])
	}
	if got["uploads"] != fp {
		t.Errorf("uploads shows %q, want %s", got["uploads"], fp)
	}
	for name, k := range got {
		if strings.Contains(k, "secret") && name != "shown" {
			t.Errorf("%s shows the secret: %q", name, k)
		}
	}
	if k := ms[0].Rule.DisplayKey("someone-else:abc"); !strings.HasPrefix(k, "fp:") {
		t.Errorf("a key of another rule shows %q, want a fingerprint", k)
	}
}

func mustCompile(t *testing.T, yaml string) *Set {
	t.Helper()
	c, err := Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
