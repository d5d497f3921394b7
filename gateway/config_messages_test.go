package gateway

import (
	"regexp"
	"strings"
	"testing"
)

// goWords are what a message in the user's words never holds: a Go type
// (storeconfig.Config, []string, map[string]...), a YAML tag, or yaml.v3's
// own prefix.
var goWords = regexp.MustCompile(`\b[a-z]+\.[A-Z][A-Za-z]+\b|\[\][a-z]|map\[|\bint(64)?\b|\bfloat64\b|!!|yaml: unmarshal|unmarshal`)

// TestMisconfigInUsersWords feeds bad files through the real loader: each
// message names the file, the line and the field, says how to fix it, and
// holds no Go type name.
func TestMisconfigInUsersWords(t *testing.T) {
	const rule = "rules:\n  - name: r\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n"
	for _, tt := range []struct {
		name, yaml string
		want       []string // each in the message
	}{
		{"upstream without a scheme", "upstream: 127.0.0.1:3000\n" + rule,
			[]string{"f.yaml:1: upstream:", "add http://", "http://127.0.0.1:3000"}},
		{"upstream host:port without a scheme", "upstream: localhost:3000\n" + rule,
			[]string{"f.yaml:1: upstream:", "add http://"}},
		{"fractional rate", "rules:\n  - name: r\n    limit: {algorithm: fixed_window, rate: 10.5, period: 1s}\n",
			[]string{"f.yaml:3: rules[0].limit.rate:", "10.5", "whole", "rate: 21, period: 2s"}},
		{"rate under one", "rules:\n  - name: r\n    limit:\n      algorithm: token_bucket\n      rate: 0.5\n      period: 1m\n",
			[]string{"f.yaml:5: rules[0].limit.rate:", "0.5", "rate: 1, period: 2m"}},
		{"fractional rate, period in days", "rules:\n  - name: r\n    limit: {algorithm: fixed_window, rate: 2.5, period: 1d}\n",
			[]string{"f.yaml:3: rules[0].limit.rate:", "rate: 5, period: 2d"}},
		{"fractional override rate", "rules:\n  - name: r\n    key: [header:X-Key]\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n    overrides:\n      vip: {algorithm: fixed_window, rate: 1.25, period: 1s}\n",
			[]string{"f.yaml:6: rules[0].overrides.vip.rate:", "rate: 5, period: 4s"}},
		{"fractional burst", "rules:\n  - name: r\n    limit: {algorithm: token_bucket, rate: 5, period: 1s, burst: 7.5}\n",
			[]string{"f.yaml:3: rules[0].limit.burst:", "7.5", "whole number"}},
		{"fractional instances", "store: {url: 'redis://127.0.0.1:6379/0', instances: 2.5}\n" + rule,
			[]string{"f.yaml:1: store.instances:", "2.5", "whole number"}},
		{"fractional body_buffer", "client:\n  body_buffer: 1.5\n" + rule,
			[]string{"f.yaml:2: client.body_buffer:", "whole number"}},
		{"fractional status", "rules:\n  - name: r\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n    refused: {status: 429.5}\n",
			[]string{"f.yaml:4: rules[0].refused.status:", "whole number"}},
		{"bad indentation", "upstream: builtin:demo\nrules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n  - name: b\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n   - name: c\n",
			[]string{"f.yaml:7:", "indent"}},
		{"bad indentation in a mapping", "upstream: builtin:demo\nrules:\n  - name: a\n    limit:\n      algorithm: fixed_window\n      rate: 5\n     period: 1s\n",
			[]string{"f.yaml:7:", "indent"}},
		{"store as a list", "store: [redis://127.0.0.1:6379/0]\n" + rule,
			[]string{"f.yaml:1: store:", "expected the store's URL", "or a mapping"}},
		{"timeout as a number", "store: {url: 'redis://127.0.0.1:6379/0', timeout: 5}\n" + rule,
			[]string{"f.yaml:1: store.timeout:", "duration"}},
		{"rules as a mapping", "rules:\n  name: r\n",
			[]string{"f.yaml:2: rules:", "expected a list"}},
		{"limit as a number", "rules:\n  - name: r\n    limit: 5\n",
			[]string{"f.yaml:3: rules[0].limit:", "expected a mapping"}},
		{"key as a mapping", "rules:\n  - name: r\n    key: {header: X-Key}\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n",
			[]string{"f.yaml:3: rules[0].key:", "expected a list", "or one item"}},
		{"methods as a mapping", "rules:\n  - name: r\n    match: {methods: {GET: 1}}\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n",
			[]string{"f.yaml:3: rules[0].match.methods:", "expected a list"}},
		{"tls as text", "tls: cert.pem\n" + rule,
			[]string{"f.yaml:1: tls:", "expected a mapping"}},
		{"unknown tls field in the store", "store: {url: 'rediss://127.0.0.1:6379/0', tls: {ca_fil: ca.pem}}\n" + rule,
			[]string{"f.yaml:1: store.tls.ca_fil: unknown field; valid: ca_file"}},
		{"h2c as text", "h2c: maybe\n" + rule,
			[]string{"f.yaml:1: h2c:", "true or false"}},
		{"unknown store field", "store: {url: 'redis://127.0.0.1:6379/0', requre: true}\n" + rule,
			[]string{"f.yaml:1: store.requre: unknown field; valid: url,", "require"}},
		{"count_only status not a status", "rules:\n  - name: r\n    limit: {algorithm: fixed_window, rate: 5, period: 1d}\n    count_only: {status: [201, 6xx]}\n",
			[]string{"f.yaml:4: rules[0].count_only.status[1]:", `"6xx" is not a status`, "100 to 599", "4xx"}},
		{"count_only on a queue", "rules:\n  - name: r\n    mode: queue\n    limit: {algorithm: leaky_bucket, rate: 5, period: 1s}\n    count_only: {status: [201]}\n",
			[]string{"f.yaml:5: rules[0].count_only:", "mode: enforce"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.yaml)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the message lacks %q:\n%s", w, msg)
				}
			}
			if m := goWords.FindString(msg); m != "" {
				t.Errorf("the message holds Go's words (%q):\n%s", m, msg)
			}
		})
	}
}

// TestShorthands: a store given as its URL alone, and a list of one given
// as its one item, read as their long forms.
func TestShorthands(t *testing.T) {
	c, err := Parse("f.yaml", []byte(`upstream: http://127.0.0.1:3000
store: redis://127.0.0.1:6379/0
client_ip: {trusted_proxies: 10.0.0.0/8}
rules:
  - name: r
    key: header:X-API-Key
    match: {methods: POST, hosts: api.example.com}
    limit: {algorithm: fixed_window, rate: 5, period: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.URL != "redis://127.0.0.1:6379/0" {
		t.Errorf("store: %+v", c.Store)
	}
	r := c.Rules[0]
	if len(r.Key) != 1 || r.Key[0] != "header:X-API-Key" {
		t.Errorf("key: %q", r.Key)
	}
	if len(r.Match.Methods) != 1 || r.Match.Methods[0] != "POST" || len(r.Match.Hosts) != 1 {
		t.Errorf("match: %+v", r.Match)
	}
	if len(c.ClientIP.TrustedProxies) != 1 {
		t.Errorf("client_ip: %+v", c.ClientIP)
	}
	if _, err := Parse("f.yaml", []byte("store: {url: redis://127.0.0.1:6379/0, timeout: 1s}\nrules:\n  - name: r\n    key: [ip, header:X-Key]\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n")); err != nil {
		t.Errorf("the long forms: %v", err)
	}
}
