package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestApplyEnv: a flag not on the command line takes its variable's value;
// the command line wins; a value the flag refuses is a usage error naming
// the variable; RATEKEEPER_ variables that name no flag are listed.
func TestApplyEnv(t *testing.T) {
	env := map[string]string{
		"RATEKEEPER_STORE_TIMEOUT": "75ms",
		"RATEKEEPER_LISTEN":        "127.0.0.1:1",
		"RATEKEEPER_H2C":           "true",
		"RATEKEEPER_LISTNE":        "typo",
		"OTHER":                    "x",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	timeout := fs.Duration("store-timeout", 50*time.Millisecond, "")
	listen := fs.String("listen", "", "")
	h2c := fs.Bool("h2c", false, "")
	other := fs.String("admin-listen", "default", "")
	got, err := parseFlags(fs, []string{"--listen", "127.0.0.1:0"}, lookup, environ)
	if err != nil {
		t.Fatal(err)
	}
	if *timeout != 75*time.Millisecond || *listen != "127.0.0.1:0" || !*h2c || *other != "default" {
		t.Errorf("timeout %v listen %q h2c %v admin %q; want 75ms from the environment, the command line's listen, h2c true, admin's default", *timeout, *listen, *h2c, *other)
	}
	if len(got.set) != 2 || got.set["store-timeout"] != "RATEKEEPER_STORE_TIMEOUT" || got.set["h2c"] != "RATEKEEPER_H2C" {
		t.Errorf("set by the environment: %v", got.set)
	}
	if len(got.unknown) != 1 || got.unknown[0] != "RATEKEEPER_LISTNE" {
		t.Errorf("unknown variables: %v, want RATEKEEPER_LISTNE", got.unknown)
	}
	set := 0
	fs.Visit(func(*flag.Flag) { set++ })
	if set != 3 {
		t.Errorf("%d flags visited, want 3: one from the command line, two from the environment", set)
	}

	env["RATEKEEPER_STORE_TIMEOUT"] = "soon"
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("store-timeout", 0, "")
	_, err = parseFlags(fs, nil, lookup, nil)
	var u usageError
	if err == nil || !strings.Contains(err.Error(), "RATEKEEPER_STORE_TIMEOUT") || !errors.As(err, &u) {
		t.Errorf("a bad value: %v, want a usage error naming the variable", err)
	}
}

// TestCheckShowsEnvironment: check lays the environment over the file as
// the proxy would, shows each override and its variable, says the order,
// names variables that set nothing, and refuses a value that cannot apply,
// naming the variable.
func TestCheckShowsEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("upstream: builtin:demo\nstore: {url: 'redis://127.0.0.1:6379', timeout: 50ms}\nrules:\n  - name: all\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n"), 0o644)
	t.Setenv("RATEKEEPER_STORE_TIMEOUT", "75ms")
	t.Setenv("RATEKEEPER_STORE", "redis://:hunter2@127.0.0.1:6380")
	t.Setenv("RATEKEEPER_BOGUS", "1")
	var out, errOut bytes.Buffer
	if err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut); err != nil {
		t.Fatalf("check: %v\n%s", err, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"timeout 75ms",
		"127.0.0.1:6380",
		"flags win, then RATEKEEPER_* variables, then the file",
		"--store-timeout = 75ms, from RATEKEEPER_STORE_TIMEOUT",
		"--store = redis://:xxxxx@127.0.0.1:6380, from RATEKEEPER_STORE",
		"RATEKEEPER_BOGUS names no flag",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("check's output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "hunter2") {
		t.Errorf("check printed the password:\n%s", got)
	}

	t.Setenv("RATEKEEPER_STORE_ON_ERROR", "maybe")
	out.Reset()
	errOut.Reset()
	if err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut); err == nil {
		t.Fatal("check accepted RATEKEEPER_STORE_ON_ERROR=maybe")
	}
	if e := errOut.String(); !strings.Contains(e, "RATEKEEPER_STORE_ON_ERROR") || !strings.Contains(e, "on_error") {
		t.Errorf("the error does not name the variable and the field: %s", e)
	}
}

// TestProxyHelpDefaults: proxy -h shows no store default that the file
// would silently override (its store flags override the file's store
// section), and names the field instead; serve, whose store comes from
// its flags alone, shows the defaults.
func TestProxyHelpDefaults(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"proxy", "-h"}, &out, &errOut); code != 0 {
		t.Fatalf("proxy -h: exit %d", code)
	}
	help := errOut.String()
	if strings.Contains(help, `(default "memory://")`) || strings.Contains(help, "(default 50ms)") || strings.Contains(help, `(default "allow")`) {
		t.Errorf("proxy -h shows defaults the file overrides:\n%s", help)
	}
	for _, want := range []string{"default: the file's store.url, else memory://", "default: the file's store.timeout, else 50ms", "default: the file's store.max_keys, else 1000000"} {
		if !strings.Contains(help, want) {
			t.Errorf("proxy -h lacks %q:\n%s", want, help)
		}
	}
	errOut.Reset()
	run(context.Background(), []string{"serve", "-h"}, &out, &errOut)
	if !strings.Contains(errOut.String(), `(default "memory://")`) {
		t.Errorf("serve -h lacks the store's default:\n%s", errOut.String())
	}
}

// TestE2EEnvironment: the proxy binary takes its upstream and store from
// RATEKEEPER_ variables over the file, its command line over both, logs
// which variables it used, and warns of one that names no flag.
func TestE2EEnvironment(t *testing.T) {
	up := newUpstream(t, nil)
	// A closed port: the store fails at once, and on_error deny answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	t.Setenv("RATEKEEPER_UPSTREAM", up.URL)
	t.Setenv("RATEKEEPER_STORE", "redis://"+closed)
	t.Setenv("RATEKEEPER_STORE_ON_ERROR", "deny")
	t.Setenv("RATEKEEPER_LISTEN", "127.0.0.1:1") // the command line's --listen wins
	t.Setenv("RATEKEEPER_UPSTREM", "typo")
	p := startProxy(t, "store: {url: memory://, on_error: allow}\nrules:\n  - name: all\n    limit: {algorithm: fixed_window, rate: 5, period: 1m}\n")
	resp := p.do("GET", "/")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503: the environment's store (down) and on_error deny over the file's memory store", resp.StatusCode)
	}
	logs := p.Logs()
	for _, want := range []string{"RATEKEEPER_STORE_ON_ERROR", "RATEKEEPER_UPSTREM"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs do not name %s:\n%s", want, logs)
		}
	}
}

// TestLogDurationsInSeconds: a duration in a log line is a number of
// seconds, in the JSON and the text format alike.
func TestLogDurationsInSeconds(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		logger, err := newLogger(&buf, "info", format)
		if err != nil {
			t.Fatal(err)
		}
		logger.Info("x", "cooldown", 250*time.Millisecond, "retry_after", 90*time.Second)
		got := buf.String()
		want := []string{`"cooldown":0.25`, `"retry_after":90`}
		if format == "text" {
			want = []string{"cooldown=0.25", "retry_after=90"}
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %s", format, got, w)
			}
		}
	}
}
