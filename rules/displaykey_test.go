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

func mustCompile(t testing.TB, yaml string) *Set {
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

// FuzzDisplayKey shows a key made of any header value: never the value
// itself (but with show_key), always one fingerprint per header part.
func FuzzDisplayKey(f *testing.F) {
	set := mustCompile(f, `
rules:
  - name: hidden
    key: [header:X-API-Key, ip]
    limit: {algorithm: fixed_window, rate: 10, period: 1m}
  - name: shown
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 10, period: 1m}
    show_key: true
`)
	f.Add("sk_live_0123456789abcdef")
	f.Add("a|b{c}d#e h=f")
	f.Add(strings.Repeat("x", 300))
	f.Fuzz(func(t *testing.T, v string) {
		if v == "" {
			return // no key header: keyed by the address (on_missing_key: ip)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["X-Api-Key"] = []string{v}
		for _, m := range set.Match(nil, r, netip.MustParseAddr("192.0.2.1")) {
			got := m.Rule.DisplayKey(m.Key)
			switch m.Rule.Name {
			case "hidden":
				if len(v) >= 13 && strings.Contains(got, v) {
					t.Fatalf("%q shows the value: %q", v, got)
				}
				if !strings.HasPrefix(got, "fp:") || !strings.HasSuffix(got, "|192.0.2.1") {
					t.Fatalf("%q shows as %q, want a fingerprint and the address", v, got)
				}
			case "shown":
				if strings.HasPrefix(got, "h=") {
					t.Fatalf("%q shows as %q", v, got)
				}
			}
		}
	})
}
