package tlsconfig_test

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/tlstest"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// Each broken section is refused naming its field and what is wrong.
func TestServerProblems(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	ca.Server(t, "a.test").Write(t, dir, "a")
	ca.Server(t, "b.test").Write(t, dir, "b")
	ca.Write(t, dir, "ca")
	os.WriteFile(filepath.Join(dir, "garbage.pem"), []byte("not PEM"), 0o600)
	for _, tc := range []struct {
		name  string
		s     tlsconfig.Server
		field string
		want  string
	}{
		{"missing cert", tlsconfig.Server{CertFile: "nope.crt", KeyFile: "a.key"}, "cert_file", "no such file"},
		{"missing key", tlsconfig.Server{CertFile: "a.crt", KeyFile: "nope.key"}, "key_file", "no such file"},
		{"key without cert", tlsconfig.Server{KeyFile: "a.key"}, "cert_file", "without its certificate"},
		{"cert without key", tlsconfig.Server{CertFile: "a.crt"}, "key_file", "without its private key"},
		{"mismatched pair", tlsconfig.Server{CertFile: "a.crt", KeyFile: "b.key"}, "key_file", "does not match"},
		{"not PEM", tlsconfig.Server{CertFile: "garbage.pem", KeyFile: "a.key"}, "cert_file", "PEM"},
		{"switched files", tlsconfig.Server{CertFile: "a.key", KeyFile: "a.crt"}, "cert_file", "holds no PEM certificate"},
		{"a certificate as the key", tlsconfig.Server{CertFile: "a.crt", KeyFile: "a.crt"}, "key_file", "certificate rather than a key"},
		{"version", tlsconfig.Server{CertFile: "a.crt", KeyFile: "a.key", MinVersion: "1.0"}, "min_version", "use 1.2 or 1.3"},
		{"client CA not PEM", tlsconfig.Server{CertFile: "a.crt", KeyFile: "a.key", ClientCAFile: "garbage.pem"}, "client_ca_file", "no PEM certificate"},
		{"only a CA", tlsconfig.Server{ClientCAFile: "ca.crt"}, "cert_file", "is missing"},
		{"second pair", tlsconfig.Server{CertFile: "a.crt", KeyFile: "a.key", Certificates: []tlsconfig.Pair{{CertFile: "b.crt", KeyFile: "a.key"}}}, "certificates[0].key_file", "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.s.Resolve(dir).Problems()
			if len(errs) != 1 {
				t.Fatalf("problems: %v, want one", errs)
			}
			if errs[0].Field != tc.field || !strings.Contains(errs[0].Err.Error(), tc.want) {
				t.Errorf("problem %q, want field %s saying %q", errs[0], tc.field, tc.want)
			}
			if _, err := tc.s.Resolve(dir).Config(tlsconfig.Options{}); err == nil {
				t.Error("Config accepted what Problems refused")
			}
		})
	}
	if errs := (tlsconfig.Server{CertFile: "a.crt", KeyFile: "a.key", ClientCAFile: "ca.crt", MinVersion: "1.3"}).Resolve(dir).Problems(); errs != nil {
		t.Errorf("a good section: %v", errs)
	}
	if errs := (tlsconfig.Server{}).Resolve(dir).Problems(); errs != nil {
		t.Errorf("no TLS: %v", errs)
	}
}

// serve answers TLS handshakes on a loopback listener with cfg and
// returns its address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// handshake connects to addr and returns the server's certificate's
// first name.
func handshake(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var b [2]byte
	if _, err := c.Read(b[:]); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// Several certificates: each client gets the one for the name it asks for,
// and the default one without a name it covers.
func TestServerChoosesByName(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	ca.Server(t, "default.test", "127.0.0.1").Write(t, dir, "d")
	ca.Server(t, "api.test").Write(t, dir, "api")
	ca.Server(t, "*.internal.test").Write(t, dir, "internal")
	s := tlsconfig.Server{CertFile: "d.crt", KeyFile: "d.key", Certificates: []tlsconfig.Pair{
		{CertFile: "api.crt", KeyFile: "api.key"}, {CertFile: "internal.crt", KeyFile: "internal.key"},
	}}
	cfg, err := s.Resolve(dir).Config(tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	for name, want := range map[string]string{"api.test": "api.test", "x.internal.test": "*.internal.test", "": "default.test", "other.test": "default.test"} {
		got, err := handshake(addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err != nil || got != want {
			t.Errorf("SNI %q: served %q (%v), want %q", name, got, err, want)
		}
	}
	// And it verifies, as a client would.
	if _, err := handshake(addr, &tls.Config{ServerName: "api.test", RootCAs: ca.Pool()}); err != nil {
		t.Errorf("verified handshake: %v", err)
	}
}

// With client_ca_file, a client without a certificate, or with one from
// another CA, is refused; one from the CA is served.
func TestServerMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "test CA"), tlstest.NewCA(t, "other CA")
	ca.Server(t, "127.0.0.1").Write(t, dir, "srv")
	ca.Write(t, dir, "clients")
	cfg, err := tlsconfig.Server{CertFile: "srv.crt", KeyFile: "srv.key", ClientCAFile: "clients.crt"}.Resolve(dir).Config(tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	good, bad := ca.Client(t, "envoy").TLS(t), other.Client(t, "envoy").TLS(t)
	if _, err := handshake(addr, &tls.Config{RootCAs: ca.Pool()}); err == nil {
		t.Error("a client without a certificate was served")
	}
	if _, err := handshake(addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{bad}}); err == nil {
		t.Error("a client certificate from another CA was accepted")
	}
	if _, err := handshake(addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{good}}); err != nil {
		t.Errorf("a client certificate from the CA: %v", err)
	}
	// The client side of the package sends it from files.
	good2 := ca.Client(t, "envoy2")
	good2.Write(t, dir, "client")
	ccfg, err := tlsconfig.Client{CAFile: "clients.crt", CertFile: "client.crt", KeyFile: "client.key"}.Resolve(dir).Config(tlsconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(addr, ccfg); err != nil {
		t.Errorf("tlsconfig.Client with a certificate: %v", err)
	}
}

// A renewed certificate is served from the next handshake on; a renewal
// that does not load keeps the previous certificate; the listener never
// stops.
func TestServerFollowsItsFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	ca.Server(t, "first", "127.0.0.1").Write(t, dir, "srv")
	cfg, err := tlsconfig.Server{CertFile: "srv.crt", KeyFile: "srv.key"}.Resolve(dir).Config(tlsconfig.Options{Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	until := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := handshake(addr, client)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("served %q, want %q", got, want)
			}
		}
	}
	until("first")
	// A broken renewal: a new certificate with the old key.
	broken := ca.Server(t, "broken", "127.0.0.1")
	os.WriteFile(filepath.Join(dir, "srv.crt"), broken.CertPEM, 0o600)
	for range 20 {
		if got, err := handshake(addr, client); err != nil || got != "first" {
			t.Fatalf("after a broken renewal: served %q (%v), want the first still", got, err)
		}
	}
	// The renewal completed, written as Kubernetes does: a new directory
	// and a symlink swapped.
	second := ca.Server(t, "second", "127.0.0.1")
	os.WriteFile(filepath.Join(dir, "srv.key"), second.KeyPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "srv.crt"), second.CertPEM, 0o600)
	until("second")
}

// A client certificate renewed on disk is sent from the next handshake on.
func TestClientFollowsItsFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	ca.Server(t, "127.0.0.1").Write(t, dir, "srv")
	ca.Write(t, dir, "ca")
	ca.Client(t, "first").Write(t, dir, "client")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{readPair(t, dir, "srv")},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	names := make(chan string)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				names <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			}
			c.Close()
		}
	}()
	cfg, err := tlsconfig.Client{CAFile: "ca.crt", CertFile: "client.crt", KeyFile: "client.key"}.Resolve(dir).Config(tlsconfig.Options{Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dial := func() string {
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Handshake()
		return <-names
	}
	if got := dial(); got != "first" {
		t.Fatalf("sent %q", got)
	}
	ca.Client(t, "second").Write(t, dir, "client")
	deadline := time.Now().Add(10 * time.Second)
	for dial() != "second" {
		if time.Now().After(deadline) {
			t.Fatal("the renewed client certificate was never sent")
		}
	}
}

func readPair(t *testing.T, dir, name string) tls.Certificate {
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientProblems(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		c     tlsconfig.Client
		field string
	}{
		{tlsconfig.Client{CAFile: "nope.crt"}, "ca_file"},
		{tlsconfig.Client{CertFile: "nope.crt"}, "key_file"},
		{tlsconfig.Client{KeyFile: "nope.key"}, "cert_file"},
	} {
		errs := tc.c.Resolve(dir).Problems()
		if len(errs) != 1 || errs[0].Field != tc.field {
			t.Errorf("%+v: problems %v, want one on %s", tc.c, errs, tc.field)
		}
	}
}
