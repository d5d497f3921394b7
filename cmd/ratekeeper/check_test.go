package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/tlstest"
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

// A rule's store_mode is shown, checked against the other rules with the
// same limit, and said to do nothing on the memory store.
func TestCheckRuleStoreMode(t *testing.T) {
	dir := t.TempDir()
	run := func(store, rules string) (string, string, error) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte("upstream: builtin:demo\nstore: "+store+"\nrules:\n"+rules), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut)
		return out.String(), errOut.String(), err
	}
	global := "  - name: global\n    key: [global]\n    store_mode: lease\n    limit: {algorithm: fixed_window, rate: 1000, period: 1s}\n"
	out, _, err := run("{url: 'redis://127.0.0.1:6379'}", global+
		"  - name: per-ip\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n")
	if err != nil || !strings.Contains(out, "store mode lease (the store's: exact)") {
		t.Errorf("check: %v\n%s", err, out)
	}
	if out, _, _ := run("{url: 'memory://'}", global); !strings.Contains(out, "store_mode lease has no effect") {
		t.Errorf("the memory store's check does not say store_mode does nothing:\n%s", out)
	}
	_, errOut, err := run("{url: 'redis://127.0.0.1:6379'}", global+
		"  - name: again\n    key: [ip]\n    store_mode: sync\n    limit: {algorithm: fixed_window, rate: 1000, period: 1s}\n")
	if err == nil || !strings.Contains(errOut, "rules[1].store_mode") || !strings.Contains(errOut, `rule "global" decides the same limit`) {
		t.Errorf("two modes for one limit: %v\n%s", err, errOut)
	}
	if _, errOut, err := run("{url: 'redis://127.0.0.1:6379'}", strings.Replace(global, "lease", "eventual", 1)); err == nil || !strings.Contains(errOut, "store_mode") {
		t.Errorf("store_mode: eventual: %v\n%s", err, errOut)
	}
}

// check validates the edge fields (reading the certificate files, as the
// proxy does at start) and says what the listener and the upstream speak.
func TestCheckEdge(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "check CA")
	ca.Server(t, "localhost").Write(t, dir, "gw")
	ca.Server(t, "other").Write(t, dir, "other")
	ca.Write(t, dir, "ca")
	run := func(yaml string) (string, string, error) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut)
		return out.String(), errOut.String(), err
	}
	out, errOut, err := run("upstream: https://api.internal\nupstream_tls: {ca_file: ca.crt}\ntls:\n  cert_file: gw.crt\n  key_file: gw.key\n  client_ca_file: ca.crt\n  certificates:\n    - {cert_file: other.crt, key_file: other.key}\n")
	if err != nil {
		t.Fatalf("check: %v\n%s", err, errOut)
	}
	for _, want := range []string{"HTTPS: HTTP/2 and HTTP/1.1 by ALPN, TLS 1.2 or later, 2 certificate(s) chosen by SNI, client certificates required", "spoken to in HTTP/1.1, verified against ca.crt"} {
		if !strings.Contains(out, want) {
			t.Errorf("check's output lacks %q:\n%s", want, out)
		}
	}
	for _, tc := range []struct{ yaml, want string }{
		{"upstream: builtin:demo\ntls:\n  cert_file: gw.crt\n  key_file: other.key\n", "c.yaml:4: tls.key_file: "},
		{"upstream: builtin:demo\ntls:\n  cert_file: gw.crt\n  key_file: gw.key\n  certificates:\n    - {cert_file: nope.crt, key_file: gw.key}\n", "c.yaml:6: tls.certificates[0].cert_file: open "},
		{"upstream: https://x\nupstream_tls:\n  ca_file: gw.key\n", "c.yaml:3: upstream_tls.ca_file: " + dir + "/gw.key holds no PEM certificate"},
	} {
		if _, errOut, err := run(tc.yaml); err == nil || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: %v, output %q, want %q", tc.yaml, err, errOut, tc.want)
		}
	}
}

// check describes a rule's cost, overrides, tiers and refusal, and names
// the file, line and field of a bad one.
func TestCheckRuleOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte("upstream: builtin:demo\nclient_ip: {trusted_proxies: [10.0.0.0/8]}\nrules:\n"+s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`  - name: llm
    key: [header:X-API-Key]
    cost: {response_header: X-Tokens-Used, max: 4000}
    limit: {algorithm: token_bucket, rate: 1000, period: 1m, burst: 4000}
    overrides:
      acme: {rate: 5000, burst: 20000}
    tiers:
      header: X-Plan
      limits: {pro: {rate: 2000, burst: 8000}}
    refused: {status: 503, hide_headers: true, retry_after_jitter: 2s}
`)
	var out, errOut bytes.Buffer
	if err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut); err != nil {
		t.Fatalf("check: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"503 beyond", "costs the upstream's X-Tokens-Used response header (0..4000; 1 without it)", `client "acme": token bucket: 5000 per 1m0s, bursts of 20000`, `tier "pro" (X-Plan from a trusted proxy)`, "not shown in the rate limit headers", "Retry-After plus up to 2s at random"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check's output lacks %q:\n%s", want, out.String())
		}
	}
	write(`  - name: llm
    limit: {algorithm: sliding_window, rate: 1000, period: 1m}
    cost:
      response_header: X-Tokens-Used
      max: 4000
`)
	out.Reset()
	errOut.Reset()
	if err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut); err == nil {
		t.Fatal("check accepted a response cost on a sliding window")
	}
	for _, want := range []string{"c.yaml:7: rules[0].cost.response_header: a cost charged after the response needs the token_bucket algorithm", "c.yaml:8: rules[0].cost.max: 4000 is more than the limit allows at once (1000)"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("check's errors lack %q:\n%s", want, errOut.String())
		}
	}
}

// docs/gateway.md's sample of check's errors is what check prints for
// the file it names: a field added to the rules shows in its list.
func TestCheckErrorsAsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "$ ratekeeper check --config bad.yaml\n"
	i := strings.Index(string(doc), cmd)
	if i < 0 {
		t.Fatal("docs/gateway.md shows no " + cmd)
	}
	sample := string(doc[i+len(cmd):])
	sample = sample[:strings.Index(sample, "```")]
	dir := t.TempDir()
	bad := "rules:\n  - name: x y\n    limit: {algorithm: token_bucket, rate: 0, period: 1x}\n    limt: 3\n"
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var out, errOut bytes.Buffer
	err = runCheck(context.Background(), []string{"--config", "bad.yaml"}, &out, &errOut)
	if err == nil {
		t.Fatal("bad.yaml passed")
	}
	got := out.String() + errOut.String() + "ratekeeper check: " + err.Error() + "\n"
	if got != sample {
		t.Errorf("check prints\n%s\ndocs/gateway.md shows\n%s", got, sample)
	}
}

// check says what a rule does past its limit, and refuses with file:line
// the over_limit combinations that cannot work.
func TestCheckOverLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte("upstream: builtin:demo\nrules:\n"+s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`  - name: billed
    limit: {algorithm: fixed_window, calendar: monthly, rate: 1000}
    over_limit: {action: forward, header: X-Quota-Exceeded}
  - name: spill
    concurrency: {max: 10}
    over_limit: {action: reroute, upstream: "http://u:secret@cheap:9000"}
`)
	var out, errOut bytes.Buffer
	if err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut); err != nil {
		t.Fatalf("check: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"beyond, forwarded with its name in X-Quota-Exceeded", "beyond, rerouted to http://u:xxxxx@cheap:9000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check's output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "secret") {
		t.Errorf("check shows the upstream's password:\n%s", out.String())
	}
	write(`  - name: billed
    mode: shadow
    ban: 1h
    limit: {algorithm: fixed_window, rate: 10, period: 1m}
    over_limit: {action: reroute}
`)
	out.Reset()
	errOut.Reset()
	if err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut); err == nil {
		t.Fatal("check accepted a shadow rule that reroutes nowhere")
	}
	for _, want := range []string{"c.yaml:7: rules[0].over_limit.upstream: is missing", "c.yaml:7: rules[0].over_limit: reroute applies to an enforced rule, not mode shadow"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("check's errors lack %q:\n%s", want, errOut.String())
		}
	}
}
