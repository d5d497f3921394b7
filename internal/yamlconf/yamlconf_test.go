package yamlconf_test

import (
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/rls"
	"github.com/ratekeeper/ratekeeper/rules"
)

// TestUnknownFieldNamesValidOnes: a misspelt field, at any depth of any
// file the project reads, is reported by its path with the fields that
// would be valid there, never by a Go type's name.
func TestUnknownFieldNamesValidOnes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parse func([]byte) error
		yaml  string
		want  string
	}{
		{"rules: a rule", rulesParse, "rules:\n  - name: a\n    limt: {}\n",
			"f.yaml:3: rules[0].limt: unknown field; valid: name, match, key, on_missing_key, limit, concurrency, mode, max_delay, ban, store_mode, cost, overrides, tiers, offset_header, refused, count_only, show_key"},
		{"rules: a limit", rulesParse, "rules:\n  - name: a\n    limit:\n      algorithm: token_bucket\n      rat: 1\n",
			"f.yaml:5: rules[0].limit.rat: unknown field; valid: algorithm, rate, period, burst, stagger, log_rejected, calendar, time_zone, offset"},
		{"rules: top", rulesParse, "rule: []\n",
			"f.yaml:1: rule: unknown field; valid: client_ip, access, headers, rules"},
		{"gateway: top, inline", gatewayParse, "upstream: http://x\nlisten_addr: x\n",
			"f.yaml:2: listen_addr: unknown field; valid: listen, admin_listen, upstream,"},
		{"gateway: store", gatewayParse, "upstream: http://x\nstore:\n  on_eror: deny\n",
			"f.yaml:3: store.on_eror: unknown field; valid: url,"},
		{"gateway: match", gatewayParse, "upstream: http://x\nrules:\n  - name: a\n    match: {paths: [/x]}\n    limit: {algorithm: token_bucket, rate: 1, period: 1s}\n",
			"f.yaml:4: rules[0].match.paths: unknown field; valid: methods, path, path_prefix, strict_path, hosts, headers"},
		{"serve: rate_limit", serveParse, "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      request_per_unit: 5\n",
			"f.yaml:6: descriptors[0].rate_limit.request_per_unit: unknown field; valid: name, replaces, unit, requests_per_unit, unlimited, algorithm, burst, calendar_units"},
		{"serve: nested descriptor", serveParse, "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n        shadow: true\n",
			"f.yaml:6: descriptors[0].descriptors[0].shadow: unknown field; valid: key, value, rate_limit, descriptors, shadow_mode, detailed_metric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "not found in type") {
				t.Fatalf("names a Go type: %v", err)
			}
		})
	}
}

func rulesParse(b []byte) error   { _, err := rules.Parse("f.yaml", b); return err }
func gatewayParse(b []byte) error { _, err := gateway.Parse("f.yaml", b); return err }
func serveParse(b []byte) error   { _, err := rls.ParseDomain("f.yaml", b); return err }
