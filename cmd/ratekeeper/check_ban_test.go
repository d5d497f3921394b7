package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check shows a rule's ban, says it stays exact in sync mode, and refuses one on a shadow rule with the
// file, line and field.
func TestCheckBan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	run := func(mode string, store ...string) (string, string, error) {
		yaml := "upstream: builtin:demo\n" + strings.Join(store, "") + "rules:\n  - name: login\n    mode: " + mode +
			"\n    limit: {algorithm: fixed_window, rate: 5, period: 15m}\n    ban: 1h\n"
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut)
		return out.String(), errOut.String(), err
	}
	out, errOut, err := run("enforce")
	if err != nil || !strings.Contains(out, "429 beyond, and the key is banned for 1h0m0s") {
		t.Fatalf("check: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = run("enforce", "store: {url: 'redis://127.0.0.1:6379', mode: sync}\n")
	if err != nil || !strings.Contains(out, "its ban is checked in Redis on every request: bans stay exact in sync mode") {
		t.Fatalf("check in sync mode: %v\n%s%s", err, out, errOut)
	}
	_, errOut, err = run("shadow")
	if want := "c.yaml:6: rules[0].ban: a shadow rule refuses no one, so it cannot ban"; err == nil || !strings.Contains(errOut, want) {
		t.Fatalf("check of a shadow ban: %v\n%s\nwant %s", err, errOut, want)
	}
}
