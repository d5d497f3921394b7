package main

import (
	"context"
	"flag"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestStoreMisconfigStopsStart: proxy and serve exit non-zero, naming the
// store and Redis's reason, when Redis answers but refuses the
// configuration (whatever on_error says), and when it does not answer and
// --store-require is set (RATEKEEPER_STORE_REQUIRE alike).
func TestStoreMisconfigStopsStart(t *testing.T) {
	in := redistest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	gw := writeConfig(t, dir, "gw.yaml", "upstream: builtin:demo\nrules:\n  - name: all\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n")
	desc := writeConfig(t, dir, "d.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	proxy := []string{"proxy", "--config", gw, "--listen", "127.0.0.1:0"}
	serve := []string{"serve", "--config", desc, "--grpc-listen", "127.0.0.1:0", "--http-listen", "-", "--admin-listen", "-"}
	bin := binary(t)
	bad := "redis://" + in.Addr() + "/99"
	for _, tt := range []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"proxy, database out of range", append(proxy, "--store", bad), nil, []string{in.Addr(), "DB index is out of range"}},
		{"serve, database out of range", append(serve, "--store", bad), nil, []string{in.Addr(), "DB index is out of range"}},
		{"proxy, unknown URL option", append(proxy, "--store", in.URL()+"?foo=bar"), nil, []string{"unexpected option: foo"}},
		{"proxy, require and no answer", append(proxy, "--store", "redis://"+closed+"/0", "--store-require"), nil, []string{closed, "connection refused", "require"}},
		{"serve, require and no answer", append(serve, "--store", "redis://"+closed+"/0"), []string{"RATEKEEPER_STORE_REQUIRE=true"}, []string{closed, "connection refused", "require"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tt.args...)
			cmd.Env = append(cmd.Environ(), tt.env...)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("still running after 20s: it started\n%s", out)
			}
			if err == nil {
				t.Fatalf("exited 0\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the output does not say %q:\n%s", w, out)
				}
			}
		})
	}
}

// --store-require=false (RATEKEEPER_STORE_REQUIRE=false alike) turns off
// the file's store.require: an override that only turned it on would be
// ignored in silence.
func TestStoreRequireFalseOverridesTheFile(t *testing.T) {
	path := writeConfig(t, t.TempDir(), "gw.yaml", "upstream: builtin:demo\nstore: {url: 'redis://127.0.0.1:6379/0', require: true}\n")
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--store-require=false"}, false},
		{[]string{"--store-require"}, true},
	} {
		fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
		pf := registerProxyFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := gateway.LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pf.options(fs).Apply(cfg)
		if cfg.Store.Require != tt.want {
			t.Errorf("%v over the file's require: true: require %v, want %v", tt.args, cfg.Store.Require, tt.want)
		}
	}
}
