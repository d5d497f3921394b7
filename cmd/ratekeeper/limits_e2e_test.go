package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const e2eToken = "e2e-admin-token-0123456789"

// limitsCmd runs `ratekeeper limits args...` and returns its output and
// whether it succeeded.
func limitsCmd(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	out, err := exec.Command(binary(t), append([]string{"limits"}, args...)...).CombinedOutput()
	return string(out), err == nil
}

func tokenFile(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestE2ELimitsProxy: list, show and reset against a real proxy's admin
// listener; a reset client is admitted again, another keeps its count, and
// a reset without the token is refused.
func TestE2ELimitsProxy(t *testing.T) {
	tok := tokenFile(t, e2eToken)
	p := startProxy(t, `upstream: builtin:demo
admin: {reset: true, token_file: `+tok+`}
store: {url: "memory://"}
rules:
  - name: per-key
    key: ["header:X-API-Key"]
    on_missing_key: skip
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
    overrides:
      carol: {rate: 3}
`)
	admin := "http://" + p.admin
	for i, want := range []int{200, 200, 429} {
		if got := p.do("GET", "/", "X-API-Key", "alice").StatusCode; got != want {
			t.Fatalf("alice %d: %d, want %d", i, got, want)
		}
	}
	p.do("GET", "/", "X-API-Key", "bob")

	out, ok := limitsCmd(t, "list", "--admin", p.admin) // host:port, as admin_listen writes it
	if !ok || !strings.Contains(out, `"name": "per-key"`) || !strings.Contains(out, `"reset_enabled": true`) {
		t.Fatalf("list: %s", out)
	}
	out, ok = limitsCmd(t, "show", "--admin", admin, "per-key", "--header", "X-API-Key: alice")
	if !ok || !strings.Contains(out, `"allowed": false`) || !strings.Contains(out, `"remaining": 0`) {
		t.Fatalf("show alice: %s", out)
	}
	out, ok = limitsCmd(t, "reset", "--admin", admin, "per-key", "--header", "X-API-Key: alice")
	if ok || !strings.Contains(out, "401") {
		t.Fatalf("reset without a token: %s", out)
	}
	out, ok = limitsCmd(t, "reset", "--admin", admin, "--token-file", tokenFile(t, "another-token-0123456789"), "per-key", "--header", "X-API-Key: alice")
	if ok || !strings.Contains(out, "401") {
		t.Fatalf("reset with a wrong token: %s", out)
	}
	out, ok = limitsCmd(t, "reset", "--admin", admin, "--token-file", tok, "per-key", "--header", "X-API-Key: alice")
	if !ok || !strings.Contains(out, `"reset": true`) || !strings.Contains(out, `"remaining": 2`) {
		t.Fatalf("reset: %s", out)
	}
	if got := p.do("GET", "/", "X-API-Key", "alice").StatusCode; got != 200 {
		t.Fatalf("alice after reset: %d", got)
	}
	out, ok = limitsCmd(t, "show", "--admin", admin, "per-key", "--header", "X-API-Key: bob")
	if !ok || !strings.Contains(out, `"remaining": 1`) {
		t.Fatalf("bob after alice's reset: %s", out)
	}
	// A client with an override: shown and reset under its own limit.
	for i, want := range []int{200, 200, 200, 429} {
		if got := p.do("GET", "/", "X-API-Key", "carol").StatusCode; got != want {
			t.Fatalf("carol %d: %d, want %d", i, got, want)
		}
	}
	out, ok = limitsCmd(t, "show", "--admin", admin, "per-key", "--header", "X-API-Key: carol")
	if !ok || !strings.Contains(out, `"override": true`) || !strings.Contains(out, `"limit": 3`) || !strings.Contains(out, `"remaining": 0`) {
		t.Fatalf("show carol: %s", out)
	}
	out, ok = limitsCmd(t, "reset", "--admin", admin, "--token-file", tok, "per-key", "--header", "X-API-Key: carol")
	if !ok || !strings.Contains(out, `"remaining": 3`) {
		t.Fatalf("reset carol: %s", out)
	}
	if got := p.do("GET", "/", "X-API-Key", "carol").StatusCode; got != 200 {
		t.Fatalf("carol after reset: %d", got)
	}
	out, ok = limitsCmd(t, "show", "--admin", admin, "per-key", "--header", "X-API-Key: a\r\nb")
	if ok || !strings.Contains(out, "400") || !strings.Contains(out, "control character") {
		t.Fatalf("CRLF: %s", out)
	}
	if n := p.metric("ratekeeper_admin_unauthorized_total"); n != 2 {
		t.Fatalf("ratekeeper_admin_unauthorized_total = %v, want 2", n)
	}
	if !strings.Contains(p.Logs(), "admin request refused") {
		t.Fatal("the refused reset is not logged")
	}
}

// TestE2ELimitsServe: list, show (peek) and reset against a real
// ratekeeper serve, reset on only with --admin-token-file.
func TestE2ELimitsServe(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "e2e.yaml", e2eConfig)
	tok := tokenFile(t, e2eToken)
	p := startServe(t, cfg, "--admin-token-file", tok)
	serve := "http://" + p.http
	for i := 0; i < 5; i++ {
		p.ask("e2e", 0, rd("fixed", "x"))
	}
	if got := p.ask("e2e", 0, rd("fixed", "x")).OverallCode.String(); got != "OVER_LIMIT" {
		t.Fatalf("6th: %s", got)
	}
	out, ok := limitsCmd(t, "list", "--serve", serve)
	if !ok || !strings.Contains(out, `"descriptor": "e2e.fixed"`) || !strings.Contains(out, `"reset_enabled": true`) {
		t.Fatalf("list: %s", out)
	}
	for i := 0; i < 2; i++ { // a peek takes nothing
		out, ok = limitsCmd(t, "show", "--serve", serve, "--domain", "e2e", "--descriptor", "fixed=x")
		if !ok || !strings.Contains(out, `"overall_code": "OVER_LIMIT"`) || !strings.Contains(out, `"limit_remaining": 0`) {
			t.Fatalf("show: %s", out)
		}
	}
	out, ok = limitsCmd(t, "show", "--serve", serve, "--domain", "e2e", "--descriptor", "fixed=y")
	if !ok || !strings.Contains(out, `"overall_code": "OK"`) || !strings.Contains(out, `"limit_remaining": 5`) {
		t.Fatalf("show another value: %s", out)
	}
	if out, ok = limitsCmd(t, "reset", "--serve", serve, "--domain", "e2e", "--descriptor", "fixed=x"); ok || !strings.Contains(out, "401") {
		t.Fatalf("reset without a token: %s", out)
	}
	out, ok = limitsCmd(t, "reset", "--serve", serve, "--token-file", tok, "--domain", "e2e", "--descriptor", "fixed=x", "--descriptor", "free=1")
	if !ok || !strings.Contains(strings.Join(strings.Fields(out), ""), `"reset":[true,false]`) {
		t.Fatalf("reset: %s", out)
	}
	if got := p.ask("e2e", 0, rd("fixed", "x")).OverallCode.String(); got != "OK" {
		t.Fatalf("after reset: %s", got)
	}

	// Without --admin-token-file, reset is off.
	q := startServe(t, cfg)
	if out, ok = limitsCmd(t, "reset", "--serve", "http://"+q.http, "--token-file", tok, "--domain", "e2e", "--descriptor", "fixed=x"); ok || !strings.Contains(out, "404") {
		t.Fatalf("reset off: %s", out)
	}
}
