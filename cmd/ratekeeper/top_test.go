package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dash "github.com/ratekeeper/ratekeeper/internal/server/dashboard"
	"github.com/ratekeeper/ratekeeper/rules"
)

// ratekeeper top --once prints a proxy's /v1/top, asked as the flags say
// and with the token, heaviest first, with each list's bounds.
func TestTop(t *testing.T) {
	var asked *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r
		if r.Header.Get("Authorization") != "Bearer s3cret-token-0123456789" {
			http.Error(w, `{"detail":"a token is needed"}`, http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(dash.TopAnswer{Scope: "local", Span: "1h", Rules: []dash.TopRule{{
			Rule: "per-ip", Kind: "refused", Span: "1h", Total: 196, Floor: 0, Bound: 0,
			Entries: []dash.TopEntry{{Key: "192.0.2.1", Count: 193}, {Key: "192.0.2.2", Count: 2, Error: 1}},
		}}})
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"top", "--admin", srv.URL, "--rule", "per-ip", "--span", "1h", "--scope", "fleet", "-n", "5", "--token-file", tok, "--once"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if q := asked.URL.Query(); asked.URL.Path != "/v1/top" || q.Get("rule") != "per-ip" || q.Get("span") != "1h" || q.Get("scope") != "fleet" || q.Get("n") != "5" {
		t.Fatalf("asked %s", asked.URL)
	}
	lines := strings.Split(out.String(), "\n")
	var rows []string
	for _, l := range lines {
		if strings.Contains(l, "refused ") && strings.Contains(l, "192.0.2.") {
			rows = append(rows, strings.Join(strings.Fields(l), " "))
		}
	}
	if len(rows) != 2 || rows[0] != "per-ip refused 192.0.2.1 193 0" || rows[1] != "per-ip refused 192.0.2.2 2 1" {
		t.Fatalf("rows %q in:\n%s", rows, out.String())
	}
	if !strings.Contains(out.String(), "per-ip refused: 196 over 1h") || strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("output:\n%s", out.String())
	}
	// Without the token the proxy's refusal is the error.
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"top", "--admin", srv.URL, "--once"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "401") {
		t.Fatalf("without the token: exit %d, %s", code, errb.String())
	}
	if code := run(context.Background(), []string{"top", "--once"}, &out, &errb); code != 2 {
		t.Fatalf("without --admin: exit %d, want 2", code)
	}
}

// ratekeeper top works against ratekeeper serve: its rules are descriptor
// paths, its keys the descriptor's entries with each value fingerprinted,
// and it asks for the admin token that serve was given.
func TestTopServe(t *testing.T) {
	dir := t.TempDir()
	config := writeConfig(t, dir, "top.yaml", "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	tok := writeConfig(t, dir, "token", "s3cret-token-0123456789\n")
	p := startServe(t, config, "--admin-token-file", tok)
	for range 3 {
		p.ask("api", 0, rd("api_key", "sk_live_abc"))
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"top", "--admin", p.admn, "--once"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "401") {
		t.Fatalf("without the token: exit %d, %s", code, errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"top", "--admin", p.admn, "--token-file", tok, "--once"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	row := "api.api_key refused api_key=" + rules.Fingerprint("sk_live_abc") + " 2 0"
	var found bool
	for _, l := range strings.Split(out.String(), "\n") {
		found = found || strings.Join(strings.Fields(l), " ") == row
	}
	if !found || strings.Contains(out.String(), "sk_live_abc") {
		t.Fatalf("want the row %q, no secret, in:\n%s", row, out.String())
	}
}
