package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// check reads serve's descriptor files, a file or a directory, as serve
// would: it says which domains and limits they hold, refuses what serve
// refuses, and warns of what serve starts with but can never apply.
func TestCheckServeFiles(t *testing.T) {
	dir := t.TempDir()
	good := writeConfig(t, dir, "api.yaml", "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 60}\n  - key: header_match\n    value: login\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}\n")
	writeConfig(t, dir, "web.yml", "domain: web\ndescriptors:\n  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	bad := writeConfig(t, t.TempDir(), "bad.yaml", "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 2.5}\n  - key: path\n    rate_limit: {requests_per_unit: 5}\n")
	warn := writeConfig(t, t.TempDir(), "warn.yaml", `domain: " api"
descriptors:
  - key: remote_address
  - key: header_match
    value: "login "
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: /v1/*/users
    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: nope}]}
`)
	for _, tt := range []struct {
		name, path string
		env        map[string]string
		ok         bool
		want       []string
	}{
		{"a file", good, nil, true, []string{"valid", "ratekeeper serve", "domain api", "remote_address", "60 per minute", "header_match=login"}},
		{"a directory", dir, nil, true, []string{"valid", "domain api", "domain web", "path"}},
		{"errors", bad, nil, false, []string{"bad.yaml:4: descriptors[0].rate_limit.requests_per_unit: 2.5 is not a whole number", "bad.yaml:6: descriptors[1].rate_limit.unit: is missing"}},
		{"the environment's store", good, map[string]string{"RATEKEEPER_STORE": "redis://127.0.0.1:6379/0?foo=bar"}, false, []string{"RATEKEEPER_STORE", "unexpected option: foo"}},
		{"warnings", warn, nil, true, []string{
			"warning: " + warn + ":1: domain: has white space around it",
			"warning: " + warn + ":3: descriptors[0]: has neither rate_limit nor descriptors",
			"warning: " + warn + ":5: descriptors[1].value: has white space around it",
			"warning: " + warn + ":8: descriptors[2].value: \"/v1/*/users\"",
			"warning: " + warn + ":9: descriptors[2].rate_limit.replaces[0].name: no limit of domain",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			err := runCheck(context.Background(), []string{"--config", tt.path}, &out, &errOut)
			if (err == nil) != tt.ok {
				t.Fatalf("check: %v, want ok %v\n%s%s", err, tt.ok, out.String(), errOut.String())
			}
			all := out.String() + errOut.String()
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("check's output lacks %q:\n%s", w, all)
				}
			}
			if strings.Contains(all, "unknown field; valid: listen") {
				t.Errorf("checked as a gateway file:\n%s", all)
			}
		})
	}
}
