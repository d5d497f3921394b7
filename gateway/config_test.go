package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/tlstest"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
	"path/filepath"
)

// TestConfigFile reads a whole gateway file: the gateway's fields and a
// rules file's, side by side in one mapping.
func TestConfigFile(t *testing.T) {
	c, err := LoadFile("testdata/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8080" || c.Upstream != "http://127.0.0.1:3000" || time.Duration(c.Store.Timeout) != 50*time.Millisecond {
		t.Errorf("gateway fields: %+v", c)
	}
	set, err := rules.Compile(&c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Rules) != 4 || len(c.ClientIP.TrustedProxies) != 1 {
		t.Errorf("rules fields: %d rules, %+v", len(set.Rules), c.ClientIP)
	}
}

// TestConfigErrorsNameFileLineField: a problem in the gateway's fields, or
// in the rules beside them, names the file, the line and the field, and
// all are reported at once.
func TestConfigErrorsNameFileLineField(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"store: {url: ftp://x}\n", "f.yaml:1: store: url: unknown scheme"},
		{"upstream_transport: fast\n", `f.yaml:1: upstream_transport: "fast": use direct or standard`},
		{"client_transport: direct\n", `f.yaml:1: client_transport: "direct": use fast or standard`},
		{"listen: nope\n", `f.yaml:1: listen: "nope" is not host:port`},
		{"client:\n  body_buffer: -5\n", "f.yaml:2: client.body_buffer: -5"},
		{"upstream_timeouts: {dial: -1s}\n", "f.yaml:1: upstream_timeouts.dial: must not be negative"},
		{"client: {grpc_idle_timeout: -1s}\n", "f.yaml:1: client.grpc_idle_timeout: must not be negative"},
		{"lisen: x\n", "f.yaml:1: lisen: unknown field; valid: listen, admin_listen,"},
		{"upstream: ftp://x\nrules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: 0, period: 1s}\n",
			"f.yaml:1: upstream: \"ftp://x\": use http://host:port, https://host:port or builtin:demo\nf.yaml:4: rules[0].limit.rate: rate must be positive"},
	} {
		_, err := Parse("f.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
		var e *rules.Error
		if err != nil && !errors.As(err, &e) {
			t.Errorf("%q: %T is not a *rules.Error", c.yaml, err)
		}
	}
}

// FuzzParse feeds the gateway file's decoder arbitrary bytes beside real
// certificate files: it never panics, and a file it accepts has edge
// sections that load (what check accepts, the proxy can start with).
func FuzzParse(f *testing.F) {
	dir := f.TempDir()
	ca := tlstest.NewCA(f, "fuzz CA")
	ca.Server(f, "localhost").Write(f, dir, "gw")
	ca.Server(f, "other").Write(f, dir, "other")
	ca.Write(f, dir, "ca")
	for _, seed := range []string{
		"upstream: builtin:demo\n",
		"upstream: https://x\nupstream_tls: {ca_file: ca.crt, server_name: x, cert_file: gw.crt, key_file: gw.key}\n",
		"upstream: http://x\nupstream_protocol: h2\nh2c: true\n",
		"tls: {cert_file: gw.crt, key_file: gw.key, min_version: \"1.3\", client_ca_file: ca.crt}\n",
		"tls:\n  cert_file: gw.crt\n  key_file: gw.key\n  certificates:\n    - {cert_file: other.crt, key_file: other.key}\n",
		"tls: {cert_file: gw.crt, key_file: other.key}\n",
		"tls: {cert_file: ca.crt}\nh2c: true\n",
		"tls: {min_version: 1.2}\n",
		"tls: [1]\nupstream_tls: x\n",
		"rules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 5, calendar: monthly, time_zone: Europe/Berlin, offset: 14d}\n",
		"store: {url: redis://x:1}\nrules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 5, calendar: daily}\n",
		"upstream: https://x\nupstream_tls: {ca_file: ca.crt}\nrules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 5, period: 1s}\n    over_limit: {action: reroute, upstream: \"https://y:9000\", header: X-Over}\n",
		"rules:\n  - name: a\n    concurrency: {max: 2}\n    over_limit: forward\n  - name: b\n    key: header:x-over\n    over_limit: {action: forward, header: X-Over}\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, yaml string) {
		c, err := Parse(filepath.Join(dir, "gw.yaml"), []byte(yaml))
		if err != nil {
			return
		}
		if c.TLS.Enabled() {
			if _, err := c.serverTLS().Config(tlsconfig.Options{}); err != nil {
				t.Fatalf("accepted a tls section that does not load: %v\n%s", err, yaml)
			}
		}
		if !c.UpstreamTLS.IsZero() {
			if _, err := c.upstreamTLS().Config(tlsconfig.Options{}); err != nil {
				t.Fatalf("accepted an upstream_tls section that does not load: %v\n%s", err, yaml)
			}
		}
	})
}
