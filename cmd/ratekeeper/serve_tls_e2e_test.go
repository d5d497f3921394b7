package main

// `ratekeeper serve` over TLS, as its own process: Envoy's API over gRPC
// with mutual TLS, the JSON API over HTTP/2 and HTTP/1.1, certificates
// renewed on disk, and the flags' errors at start.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/tlstest"
)

// serveTLS is a CA, the files of serve's TLS flags and a client
// certificate the CA signed.
type serveTLS struct {
	ca                   *tlstest.CA
	dir, caFile          string
	grpcCert, grpcKey    string
	httpCert, httpKey    string
	client               tlstest.Leaf
	clientCert, clientKy string
}

func newServeTLS(t *testing.T) serveTLS {
	ca := tlstest.NewCA(t, "serve CA")
	f := serveTLS{ca: ca, dir: t.TempDir(), client: ca.Client(t, "envoy")}
	f.caFile = ca.Write(t, f.dir, "ca")
	f.grpcCert, f.grpcKey = ca.Server(t, "127.0.0.1").Write(t, f.dir, "grpc")
	f.httpCert, f.httpKey = ca.Server(t, "127.0.0.1").Write(t, f.dir, "http")
	f.clientCert, f.clientKy = f.client.Write(t, f.dir, "client")
	return f
}

// clientTLS trusts the CA and, with cert, shows the client certificate.
func (f serveTLS) clientTLS(t *testing.T, cert bool) *tls.Config {
	c := &tls.Config{RootCAs: f.ca.Pool()}
	if cert {
		c.Certificates = []tls.Certificate{f.client.TLS(t)}
	}
	return c
}

// grpcTLSClient is Envoy's API over a TLS connection to addr.
func grpcTLSClient(t *testing.T, addr string, c *tls.Config) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), conn
}

// servedSerial is the serial number of the certificate addr serves to a
// new connection.
func servedSerial(t *testing.T, addr string, c *tls.Config) string {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, c)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func serialOf(t *testing.T, l tlstest.Leaf) string {
	b, _ := pem.Decode(l.CertPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

func TestServeTLS(t *testing.T) {
	f := newServeTLS(t)
	cfg := t.TempDir()
	writeConfig(t, cfg, "e2e.yaml", e2eConfig)
	p := startServe(t, cfg,
		"--grpc-tls-cert-file", f.grpcCert, "--grpc-tls-key-file", f.grpcKey, "--grpc-tls-client-ca-file", f.caFile,
		"--http-tls-cert-file", f.httpCert, "--http-tls-key-file", f.httpKey, "--http-tls-client-ca-file", f.caFile)
	if logs := p.Logs(); !strings.Contains(logs, `"grpc_tls":"mutual","http_tls":"mutual","admin_tls":"off"`) {
		t.Errorf("the start line does not say which listeners are TLS:\n%s", logs)
	}

	t.Run("grpc with a client certificate", func(t *testing.T) {
		client, conn := grpcTLSClient(t, p.grpc, f.clientTLS(t, true))
		n := 0
		for range 10 {
			r, err := client.ShouldRateLimit(ctx10s(t), &rlsv3.RateLimitRequest{Domain: "e2e", Descriptors: []*ratelimitv3.RateLimitDescriptor{rd("fixed", "tls")}})
			if err != nil {
				t.Fatal(err)
			}
			if r.OverallCode == rlsv3.RateLimitResponse_OK {
				n++
			}
		}
		if n != 5 {
			t.Fatalf("%d of 10 passed, want 5", n)
		}
		h, err := healthpb.NewHealthClient(conn).Check(ctx10s(t), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health: %v %v", h, err)
		}
	})
	t.Run("grpc refused", func(t *testing.T) {
		// The client sees the refusal as "certificate required" or, when
		// its write loses the race with the server's close, a broken pipe:
		// Unavailable either way, where the same client with a certificate
		// is answered.
		noCert, _ := grpcTLSClient(t, p.grpc, f.clientTLS(t, false))
		for name, client := range map[string]rlsv3.RateLimitServiceClient{"without a client certificate": noCert, "in clear text": p.client} {
			_, err := client.ShouldRateLimit(ctx10s(t), &rlsv3.RateLimitRequest{Domain: "e2e", Descriptors: []*ratelimitv3.RateLimitDescriptor{rd("fixed", "refused")}})
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s: %v, want Unavailable", name, err)
			}
		}
	})
	body := `{"domain":"e2e","descriptors":[{"entries":[{"key":"fixed","value":"http"}]}]}`
	t.Run("http/2 and http/1.1", func(t *testing.T) {
		for _, c := range []struct {
			proto string
			tr    *http.Transport
		}{
			{"HTTP/2.0", &http.Transport{TLSClientConfig: f.clientTLS(t, true), ForceAttemptHTTP2: true}},
			{"HTTP/1.1", &http.Transport{TLSClientConfig: f.clientTLS(t, true), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}},
		} {
			resp, err := (&http.Client{Transport: c.tr, Timeout: 10 * time.Second}).Post("https://"+p.http+"/v1/check", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			c.tr.CloseIdleConnections()
			if resp.StatusCode != 200 || resp.Proto != c.proto || !strings.Contains(string(b), `"limit_remaining"`) {
				t.Errorf("%d %s %s, want 200 over %s", resp.StatusCode, resp.Proto, b, c.proto)
			}
		}
		tr := &http.Transport{TLSClientConfig: f.clientTLS(t, false), ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post("https://"+p.http+"/v1/check", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("answered %d without a client certificate", resp.StatusCode)
		}
		// The client may see the refusal as a broken pipe; the server says why.
		waitFor(t, "the refusal in the logs", func() bool { return strings.Contains(p.Logs(), "client didn't provide a certificate") })
	})
	t.Run("curl", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Skip("no curl")
		}
		curl := func(args ...string) (string, error) {
			args = append([]string{"-sS", "--max-time", "10", "--cacert", f.caFile, "-H", "Content-Type: application/json",
				"-d", body, "-w", "\n%{http_version}", "https://" + p.http + "/v1/check"}, args...)
			out, err := exec.Command("curl", args...).CombinedOutput()
			return string(out), err
		}
		out, err := curl("--cert", f.clientCert, "--key", f.clientKy)
		if err != nil || !strings.Contains(out, `"limit_remaining"`) {
			t.Fatalf("curl with a client certificate: %v\n%s", err, out)
		}
		t.Logf("curl spoke HTTP/%s", out[strings.LastIndexByte(out, '\n')+1:])
		if out, err := curl(); err == nil {
			t.Fatalf("curl without a client certificate was answered:\n%s", out)
		}
	})
	t.Run("admin stays clear text", func(t *testing.T) {
		if m := p.metrics(); !strings.Contains(m, "ratekeeper_decisions_total") {
			t.Fatal("no metrics over clear text")
		}
	})
	t.Run("renewed certificates", func(t *testing.T) {
		c := f.clientTLS(t, true)
		c.NextProtos = []string{"h2"}
		oldGRPC, oldHTTP := servedSerial(t, p.grpc, c), servedSerial(t, p.http, c)
		grpcLeaf, httpLeaf := f.ca.Server(t, "127.0.0.1"), f.ca.Server(t, "127.0.0.1")
		grpcLeaf.Write(t, f.dir, "grpc")
		httpLeaf.Write(t, f.dir, "http")
		wantGRPC, wantHTTP := serialOf(t, grpcLeaf), serialOf(t, httpLeaf)
		if wantGRPC == oldGRPC || wantHTTP == oldHTTP {
			t.Fatal("the new certificates have the old serial numbers")
		}
		waitFor(t, "the renewed certificates", func() bool {
			return servedSerial(t, p.grpc, c) == wantGRPC && servedSerial(t, p.http, c) == wantHTTP
		})
		client, _ := grpcTLSClient(t, p.grpc, f.clientTLS(t, true))
		if _, err := client.ShouldRateLimit(ctx10s(t), &rlsv3.RateLimitRequest{Domain: "e2e", Descriptors: []*ratelimitv3.RateLimitDescriptor{rd("fixed", "renewed")}}); err != nil {
			t.Fatalf("after the renewal: %v", err)
		}
	})
}

// TestServeTLSFlags: a missing file, a key that is not the certificate's,
// a certificate without its key are refused at start, naming the flag;
// serve -h lists the TLS flags and says the admin listener is clear text.
func TestServeTLSFlags(t *testing.T) {
	f := newServeTLS(t)
	cfg := writeConfig(t, t.TempDir(), "e2e.yaml", e2eConfig)
	for _, c := range []struct {
		flags []string
		want  string
		code  int
	}{
		{[]string{"--grpc-tls-cert-file", f.dir + "/missing.crt", "--grpc-tls-key-file", f.grpcKey}, "--grpc-tls-cert-file: open " + f.dir + "/missing.crt: no such file or directory", 1},
		{[]string{"--http-tls-cert-file", f.httpCert, "--http-tls-key-file", f.grpcKey}, "--http-tls-key-file: " + f.httpCert + " and " + f.grpcKey + ": tls: private key does not match public key", 1},
		{[]string{"--grpc-tls-cert-file", f.grpcCert, "--grpc-tls-key-file", f.grpcKey, "--grpc-tls-client-ca-file", f.dir + "/nope.crt"}, "--grpc-tls-client-ca-file: open ", 1},
		{[]string{"--grpc-tls-cert-file", f.grpcCert}, "--grpc-tls-cert-file and --grpc-tls-key-file go together", 2},
		{[]string{"--http-listen", "-", "--http-tls-cert-file", f.httpCert, "--http-tls-key-file", f.httpKey}, "--http-listen is -", 2},
	} {
		args := append([]string{"serve", "--config", cfg, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--admin-listen", "-"}, c.flags...)
		out, err := exec.Command(binary(t), args...).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: exit %v, output:\n%s\nwant exit %d and %q", c.flags, err, out, c.code, c.want)
		}
	}
	var out bytes.Buffer
	cmd := exec.Command(binary(t), "serve", "-h")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("serve -h: %v", err)
	}
	for _, flag := range []string{"-grpc-tls-cert-file", "-grpc-tls-key-file", "-grpc-tls-client-ca-file",
		"-http-tls-cert-file", "-http-tls-key-file", "-http-tls-client-ca-file",
		"-store-tls-ca-file", "-store-tls-cert-file", "-store-tls-key-file", "-store-tls-server-name", "always clear text"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("serve -h lacks %s:\n%s", flag, out.String())
		}
	}
}

// TestServeRedisTLS: serve's --store-tls-* flags reach a Redis that speaks
// TLS only and requires a client certificate.
func TestServeRedisTLS(t *testing.T) {
	f := newServeTLS(t)
	url := redistest.Server(t, redistest.WithTLS(redistest.TLS{CA: f.ca, AuthClients: true}))
	cfg := writeConfig(t, t.TempDir(), "e2e.yaml", e2eConfig)
	p := startServe(t, cfg, "--store", url, "--store-timeout", "10s", "--store-on-error", "deny",
		"--store-tls-ca-file", f.caFile, "--store-tls-cert-file", f.clientCert, "--store-tls-key-file", f.clientKy, "--store-tls-server-name", "localhost")
	if n := p.passes("e2e", rd("fixed", "redis-tls")); n != 5 {
		t.Fatalf("%d passed, want 5 (0: Redis did not answer and on_error deny refused)", n)
	}
	if logs := p.Logs(); !strings.Contains(logs, "TLS: ca_file "+f.caFile+", client certificate "+f.clientCert+", server_name localhost") {
		t.Errorf("the start line does not show the store's TLS:\n%s", logs)
	}
}
