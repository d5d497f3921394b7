package rls

import (
	"bytes"
	"context"
	"log/slog"
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

// TestNewServerLogsWarnings: what check warns of, serve logs at start and
// on each reload, with the file and line.
func TestNewServerLogsWarnings(t *testing.T) {
	config := filepath.Join(t.TempDir(), "d.yaml")
	if err := os.WriteFile(config, []byte("domain: d\ndescriptors:\n  - key: k\n    value: \"a \"\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := NewServer(context.Background(), config, ServerOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.proc.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "d.yaml:4: descriptors[0].value: has white space around it") {
		t.Fatalf("no warning logged:\n%s", logs.String())
	}
	logs.Reset()
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "descriptors[0].value: has white space around it") {
		t.Fatalf("no warning logged on reload:\n%s", logs.String())
	}
}
