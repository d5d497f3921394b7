package rls

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/tlstest"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// TestNewServerTLS: a listener's TLS files are loaded by NewServer, before
// anything listens, and a problem names the listener and the field.
func TestNewServerTLS(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "d.yaml")
	if err := os.WriteFile(config, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t, "rls CA")
	cert, key := ca.Server(t, "127.0.0.1").Write(t, dir, "server")
	good := tlsconfig.Server{CertFile: cert, KeyFile: key, ClientCAFile: ca.Write(t, dir, "ca")}
	if _, err := NewServer(context.Background(), config, ServerOptions{GRPCTLS: good, HTTPTLS: good}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    ServerOptions
		want string
	}{
		{ServerOptions{GRPCTLS: tlsconfig.Server{CertFile: cert, KeyFile: filepath.Join(dir, "none.key")}}, "grpc tls: key_file: open "},
		{ServerOptions{HTTPTLS: tlsconfig.Server{CertFile: key, KeyFile: key}}, "http tls: cert_file: "},
		{ServerOptions{HTTPListen: "-", HTTPTLS: good}, "http tls: is set, but the HTTP listener is off"},
	} {
		if _, err := NewServer(context.Background(), config, c.o); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q...", c.o, err, c.want)
		}
	}
}
