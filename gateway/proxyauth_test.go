package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRulesCannotReadProxyAuthorization: Proxy-Authorization is for the
// gateway's hop and never reaches the upstream, on either client path; a
// rule that read it would see what the upstream does not (a client adding
// "Proxy-Authorization: x" would leave a rule for anonymous clients while
// the upstream serves it as anonymous), so a config that reads it is
// refused, as one reading Connection is.
func TestRulesCannotReadProxyAuthorization(t *testing.T) {
	up := newRecUpstream(t, defaultReply)
	for _, tr := range transports {
		addr := startVia(t, tr, up.URL, "")
		if res, _ := rawExchange(t, addr, "GET /a HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic eDp5\r\n\r\n"); res.StatusCode != 200 {
			t.Fatalf("%s: %d", tr, res.StatusCode)
		}
	}
	up.mu.Lock()
	for _, r := range up.reqs {
		if v, ok := r.Header["Proxy-Authorization"]; ok {
			t.Errorf("the upstream was sent Proxy-Authorization %q", v)
		}
	}
	up.mu.Unlock()
	for _, reads := range []string{
		"match: {absent_headers: [Proxy-Authorization]}",
		"match: {headers: {proxy-authorization: '*'}}",
		"key: [header:Proxy-Authorization]",
	} {
		path := filepath.Join(t.TempDir(), "gw.yaml")
		yaml := "upstream: builtin:demo\nrules:\n  - name: r\n    " + reads + "\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n"
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := New(context.Background(), path, Options{})
		if err == nil {
			g.proc.Close()
			t.Errorf("%s: accepted, want it refused", reads)
		} else if !strings.Contains(err.Error(), "Proxy-Authorization") {
			t.Errorf("%s: %v, want an error naming Proxy-Authorization", reads, err)
		}
	}
}
