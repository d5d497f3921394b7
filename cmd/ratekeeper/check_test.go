package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check names the rules a shared mode cannot decide locally, and refuses a
// mode it does not know, naming the field.
func TestCheckSharedModes(t *testing.T) {
	dir := t.TempDir()
	write := func(store string) string {
		path := filepath.Join(dir, "c.yaml")
		yaml := "upstream: builtin:demo\nstore: " + store + "\nrules:\n" +
			"  - name: log\n    limit: {algorithm: sliding_log, rate: 5, period: 1s}\n" +
			"  - name: queue\n    mode: queue\n    limit: {algorithm: leaky_bucket, rate: 5, period: 1s}\n" +
			"  - name: window\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n"
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var out, errOut bytes.Buffer
	if err := runCheck(context.Background(), []string{"--config", write("{url: 'redis://127.0.0.1:6379', mode: lease, sync_period: 50ms}")}, &out, &errOut); err != nil {
		t.Fatalf("check: %v\n%s", err, errOut.String())
	}
	got := out.String()
	for _, want := range []string{"mode lease every 50ms", "the sliding log stays exact in lease mode", "the leaky bucket's queue stays exact in lease mode"} {
		if !strings.Contains(got, want) {
			t.Errorf("check's output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "stays exact"); n != 2 {
		t.Errorf("%d rules said to stay exact, want 2 (the fixed window is decided locally):\n%s", n, got)
	}
	out.Reset()
	errOut.Reset()
	if err := runCheck(context.Background(), []string{"--config", write("{url: 'redis://127.0.0.1:6379', mode: eventual}")}, &out, &errOut); err == nil {
		t.Fatal("check accepted mode: eventual")
	}
	if !strings.Contains(errOut.String(), "mode") || !strings.Contains(errOut.String(), "eventual") {
		t.Errorf("the error does not name the field and value: %s", errOut.String())
	}
}
