package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// check --connect asks Redis what proxy and serve would ask at start:
// a database Redis does not have is an error there, not only at start.
func TestCheckConnect(t *testing.T) {
	in := redistest.Start(t)
	dir := t.TempDir()
	rule := "rules:\n  - name: r\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n"
	for _, tt := range []struct {
		name, path string
		ok         bool
		want       string
	}{
		{"gateway, answers", writeConfig(t, dir, "good.yaml", "upstream: builtin:demo\nstore: "+in.URL()+"\n"+rule), true, "answers and accepts"},
		{"gateway, no such database", writeConfig(t, dir, "bad.yaml", "upstream: builtin:demo\nstore: redis://"+in.Addr()+"/99\n"+rule), false, "DB index is out of range"},
		{"gateway, memory", writeConfig(t, dir, "mem.yaml", "upstream: builtin:demo\n"+rule), true, "valid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := runCheck(context.Background(), []string{"--config", tt.path, "--connect"}, &out, &errOut)
			if (err == nil) != tt.ok {
				t.Fatalf("check: %v, want ok %v\n%s%s", err, tt.ok, out.String(), errOut.String())
			}
			if all := out.String() + errOut.String(); !strings.Contains(all, tt.want) {
				t.Errorf("check's output lacks %q:\n%s", tt.want, all)
			}
		})
	}
	t.Run("serve, no such database", func(t *testing.T) {
		t.Setenv("RATEKEEPER_STORE", "redis://"+in.Addr()+"/99")
		path := writeConfig(t, dir, "d.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
		var out, errOut bytes.Buffer
		if err := runCheck(context.Background(), []string{"--config", path, "--connect"}, &out, &errOut); err == nil {
			t.Fatalf("check accepted a database Redis does not have:\n%s", out.String())
		}
		if !strings.Contains(errOut.String(), "DB index is out of range") {
			t.Errorf("check's errors lack Redis's reason:\n%s", errOut.String())
		}
	})
}
