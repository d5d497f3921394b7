package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/tlstest"
	"github.com/ratekeeper/ratekeeper/storeconfig"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// TLS on the gateway's listener (termination, mutual TLS, certificate
// reloads), to the upstream and to the store.

// edge is a test PKI: a CA, the gateway's certificate for 127.0.0.1 and
// localhost, written in dir.
type edge struct {
	dir string
	ca  *tlstest.CA
}

func newEdge(t testing.TB) *edge {
	e := &edge{dir: t.TempDir(), ca: tlstest.NewCA(t, "edge CA")}
	e.ca.Server(t, "localhost", "127.0.0.1").Write(t, e.dir, "gw")
	e.ca.Write(t, e.dir, "ca")
	return e
}

// tlsSection is the gateway file's tls section for e's certificate, with
// extra lines inside it.
func (e *edge) tlsSection(extra ...string) string {
	s := "tls:\n  cert_file: " + filepath.Join(e.dir, "gw.crt") + "\n  key_file: " + filepath.Join(e.dir, "gw.key") + "\n"
	for _, x := range extra {
		s += "  " + x + "\n"
	}
	return s
}

// client speaks to the gateway over TLS with e's CA: HTTP/1.1 only, or
// HTTP/2 when h2.
func (e *edge) client(h2 bool, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), Certificates: certs}}
	var p http.Protocols
	p.SetHTTP1(!h2)
	p.SetHTTP2(h2)
	tr.Protocols = &p
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// h2cClient speaks HTTP/2 with prior knowledge over clear text.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
}

// fetch sends GET url and returns the status, the protocol and the body.
func fetch(t testing.TB, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	return resp, string(b)
}

// echoProto answers with what the upstream saw: the protocol the gateway
// spoke to it and the X-Forwarded-Proto it sent.
func echoProto(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "%s %s %s", r.Proto, r.Header.Get("X-Forwarded-Proto"), r.URL.Path)
}

const perMinute3 = "rules:\n  - name: three\n    match: {path: /limited}\n    limit: {algorithm: fixed_window, rate: 3, period: 1m}\n"

// Over TLS the gateway answers HTTP/1.1 and HTTP/2 (by ALPN) on one
// listener, on both client transports, tells the upstream the client
// came over https, and counts one client's requests together whatever
// protocol each used.
func TestTLSTermination(t *testing.T) {
	e := newEdge(t)
	up := newRecUpstream(t, echoProto)
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			g := runGateway(t, transport, up.URL, e.tlsSection()+perMinute3)
			base := "https://" + g.Addr().String()
			h1c, h2c := e.client(false), e.client(true)
			for i, c := range []*http.Client{h1c, h2c, h1c} {
				resp, body := fetch(t, c, base+"/limited")
				wantProto := []string{"HTTP/1.1", "HTTP/2.0", "HTTP/1.1"}[i]
				if resp.StatusCode != 200 || resp.Proto != wantProto || body != "HTTP/1.1 https /limited" {
					t.Fatalf("request %d: %d over %s, upstream saw %q", i, resp.StatusCode, resp.Proto, body)
				}
				if got := resp.Header.Get("X-RateLimit-Remaining"); got != fmt.Sprint(2-i) {
					t.Errorf("request %d over %s: remaining %q, want %d", i, resp.Proto, got, 2-i)
				}
			}
			for _, c := range []*http.Client{h1c, h2c} {
				resp, body := fetch(t, c, base+"/limited")
				if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"three"`) {
					t.Errorf("over the limit over %s: %d %q", resp.Proto, resp.StatusCode, body)
				}
			}
			// A path that normalizes to the limited one counts too.
			if resp, _ := fetch(t, h2c, base+"/x/../limited"); resp.StatusCode != 429 {
				t.Errorf("/x/../limited over HTTP/2: %d", resp.StatusCode)
			}
			if n := handOffCount(g.Addr().String()); transport == "fast" && n != 1 {
				// The HTTP/2 connection; HTTP/1.1 over TLS stays on the
				// fast path.
				t.Errorf("%d hand-offs to net/http, want 1", n)
			}
			// A connection the fast path began and then handed to net/http
			// (a chunked body) is still known to be TLS.
			tc, err := tls.Dial("tcp", g.Addr().String(), &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost"})
			if err != nil {
				t.Fatal(err)
			}
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(tc, "GET /a HTTP/1.1\r\nHost: localhost\r\n\r\nPOST /b HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n1\r\nx\r\n0\r\n\r\n")
			b, _ := io.ReadAll(tc)
			tc.Close()
			if n := strings.Count(string(b), "HTTP/1.1 https /"); n != 2 {
				t.Errorf("X-Forwarded-Proto across a hand-off: %q", b)
			}
			// Clear text on the TLS port is refused, not served.
			nc, err := net.Dial("tcp", g.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(nc, "GET /limited HTTP/1.1\r\nHost: x\r\n\r\n")
			b, _ = io.ReadAll(nc)
			nc.Close()
			if strings.Contains(string(b), "HTTP/1.1 200") {
				t.Errorf("a clear-text request on the TLS listener was served: %q", b)
			}
		})
	}
}

// With client_ca_file only clients with a certificate from that CA are
// served, on both client transports.
func TestTLSMutual(t *testing.T) {
	e := newEdge(t)
	clients := tlstest.NewCA(t, "clients CA")
	clients.Write(t, e.dir, "clients")
	up := newRecUpstream(t, echoProto)
	good := clients.Client(t, "service-a").TLS(t)
	stranger := e.ca.Client(t, "stranger").TLS(t)
	for _, transport := range []string{"fast", "standard"} {
		g := runGateway(t, transport, up.URL, e.tlsSection("client_ca_file: "+filepath.Join(e.dir, "clients.crt"))+perMinute3)
		base := "https://" + g.Addr().String() + "/"
		for _, h2 := range []bool{false, true} {
			if _, err := e.client(h2).Get(base); err == nil {
				t.Errorf("%s h2=%v: a client without a certificate was served", transport, h2)
			}
			if _, err := e.client(h2, stranger).Get(base); err == nil {
				t.Errorf("%s h2=%v: a certificate from another CA was accepted", transport, h2)
			}
			if resp, _ := fetch(t, e.client(h2, good), base); resp.StatusCode != 200 {
				t.Errorf("%s h2=%v: a client certificate from the CA: %d", transport, h2, resp.StatusCode)
			}
		}
	}
}

// A certificate renewed on disk is served from the next handshake on,
// while a connection opened before goes on.
func TestTLSCertificateReload(t *testing.T) {
	e := newEdge(t)
	up := newRecUpstream(t, echoProto)
	g := runGateway(t, "fast", up.URL, e.tlsSection())
	addr := g.Addr().String()
	serial := func(c *tls.Conn) string { return c.ConnectionState().PeerCertificates[0].SerialNumber.String() }
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: e.ca.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := dial()
	defer old.Close()
	first := serial(old)
	e.ca.Server(t, "localhost", "127.0.0.1").Write(t, e.dir, "gw")
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := dial()
		s := serial(c)
		c.Close()
		if s != first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was never served")
		}
		time.Sleep(10 * time.Millisecond) // the files are looked at once a second
	}
	old.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(old, "GET /still HTTP/1.1\r\nHost: localhost\r\n\r\n")
	b := make([]byte, 12)
	if _, err := io.ReadFull(old, b); err != nil || string(b) != "HTTP/1.1 200" {
		t.Errorf("the connection opened before the renewal: %q, %v", b, err)
	}
}

// A broken tls section is refused at start, naming the file, line and
// field.
func TestTLSConfigErrors(t *testing.T) {
	e := newEdge(t)
	e.ca.Server(t, "other").Write(t, e.dir, "other")
	dir := e.dir
	for _, tc := range []struct{ yaml, want string }{
		{"tls:\n  cert_file: missing.crt\n  key_file: gw.key\n", ":3: tls.cert_file: open " + dir + "/missing.crt"},
		{"tls:\n  cert_file: gw.crt\n  key_file: other.key\n", ":4: tls.key_file: " + dir + "/gw.crt and " + dir + "/other.key: tls: private key does not match public key"},
		{"tls:\n  cert_file: gw.crt\n  key_file: gw.key\n  min_version: \"1.1\"\n", "tls.min_version"},
		{"tls:\n  cert_file: gw.crt\n  key_file: gw.key\nh2c: true\n", "h2c: is for a clear-text listener"},
		{"upstream_tls:\n  ca_file: ca.crt\n", "upstream_tls: is set but the upstream"},
		{"upstream_protocol: h3\n", `upstream_protocol: "h3": use auto, http1 or h2`},
	} {
		path := filepath.Join(dir, "gw.yaml")
		os.WriteFile(path, []byte("upstream: http://127.0.0.1:1\n"+tc.yaml), 0o644)
		_, err := New(context.Background(), path, Options{})
		if err == nil || !strings.Contains(err.Error(), path+tc.want) && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
	// Relative paths are the file's directory's.
	path := filepath.Join(dir, "gw.yaml")
	os.WriteFile(path, []byte("upstream: http://127.0.0.1:1\ntls:\n  cert_file: gw.crt\n  key_file: gw.key\n"), 0o644)
	if _, err := LoadFile(path); err != nil {
		t.Errorf("relative paths: %v", err)
	}
}

// An https:// upstream with a private CA is verified against ca_file,
// under the name server_name gives, and is shown the client certificate
// it asks for; without the CA it is refused (502), and with
// insecure_skip_verify accepted, with a warning in the log.
func TestUpstreamTLS(t *testing.T) {
	e := newEdge(t)
	upCA := tlstest.NewCA(t, "upstream CA")
	upCA.Write(t, e.dir, "upca")
	upCert := upCA.Server(t, "api.internal").TLS(t)
	gwClient := e.ca.Client(t, "gateway")
	gwClient.Write(t, e.dir, "gwclient")
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s client=%s", r.Proto, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{Certificates: []tls.Certificate{upCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: e.ca.Pool()}
	up.StartTLS()
	t.Cleanup(up.Close)
	url := up.URL
	good := "upstream_tls:\n  ca_file: upca.crt\n  server_name: api.internal\n  cert_file: gwclient.crt\n  key_file: gwclient.key\n"
	for _, tc := range []struct {
		name, extra, want string
		status            int
	}{
		{"verified, auto", good, "HTTP/1.1 client=gateway", 200},
		{"verified, h2", good + "upstream_protocol: h2\n", "HTTP/2.0 client=gateway", 200},
		{"verified, http1", good + "upstream_protocol: http1\n", "HTTP/1.1 client=gateway", 200},
		{"without the CA", "upstream_tls:\n  server_name: api.internal\n  cert_file: gwclient.crt\n  key_file: gwclient.key\n", "", 502},
		{"the wrong name", "upstream_tls:\n  ca_file: upca.crt\n  cert_file: gwclient.crt\n  key_file: gwclient.key\n", "", 502},
		{"no client certificate", "upstream_tls:\n  ca_file: upca.crt\n  server_name: api.internal\n", "", 502},
		{"insecure_skip_verify", "upstream_tls:\n  insecure_skip_verify: true\n  cert_file: gwclient.crt\n  key_file: gwclient.key\n", "HTTP/1.1 client=gateway", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := "listen: 127.0.0.1:0\nwatch: -1s\nupstream: " + url + "\n" + tc.extra
			path := filepath.Join(e.dir, "gw.yaml")
			os.WriteFile(path, []byte(yaml), 0o644)
			var log strings.Builder
			g, err := New(context.Background(), path, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer g.proc.Close()
			if warned := strings.Contains(log.String(), "insecure_skip_verify is set"); warned != strings.Contains(tc.extra, "insecure") {
				t.Errorf("warned of insecure_skip_verify: %v; log:\n%s", warned, log.String())
			}
			if direct := g.direct != nil; direct != !strings.Contains(tc.extra, "h2") {
				t.Errorf("the direct transport in use: %v", direct)
			}
			rec := httptest.NewRecorder()
			g.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
			if rec.Code != tc.status || tc.want != "" && rec.Body.String() != tc.want {
				t.Errorf("%d %q, want %d %q", rec.Code, rec.Body.String(), tc.status, tc.want)
			}
		})
	}
	// The fast path serves an https:// upstream too: no hand-off.
	os.WriteFile(filepath.Join(e.dir, "upca.crt"), upCA.PEM, 0o644)
	g := runGateway(t, "fast", url, "upstream_tls:\n  ca_file: "+filepath.Join(e.dir, "upca.crt")+"\n  server_name: api.internal\n  cert_file: "+filepath.Join(e.dir, "gwclient.crt")+"\n  key_file: "+filepath.Join(e.dir, "gwclient.key")+"\n")
	for range 3 {
		resp, body := fetch(t, http.DefaultClient, "http://"+g.Addr().String()+"/x")
		if resp.StatusCode != 200 || body != "HTTP/1.1 client=gateway" {
			t.Errorf("through the fast path: %d %q", resp.StatusCode, body)
		}
	}
	if n := handOffCount(g.Addr().String()); n != 0 {
		t.Errorf("%d hand-offs: the fast path did not serve the https upstream", n)
	}
}

// BenchmarkTLS is BenchmarkFastPath over TLS (HTTP/1.1 keep-alive), with
// each client transport, and over HTTP/2: is the fast path still worth
// it once every byte is encrypted?
func BenchmarkTLS(b *testing.B) {
	e := newEdge(b)
	up := newRecUpstream(b, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	rule := "rules:\n  - name: per-ip\n    key: [ip]\n    limit: {algorithm: leaky_bucket, rate: 1000000, period: 1s, burst: 1000}\n"
	for _, tc := range []struct {
		name, transport string
		h2              bool
	}{{"http1-fast", "fast", false}, {"http1-standard", "standard", false}, {"h2", "fast", true}} {
		b.Run(tc.name, func(b *testing.B) {
			g := runGateway(b, tc.transport, up.URL, e.tlsSection()+rule)
			c := e.client(tc.h2)
			c.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
			defer c.CloseIdleConnections()
			getParallelWith(b, c, "https://localhost:"+portOf(g.Addr())+"/v1/items/7")
		})
	}
}

// The store's tls section takes its paths from the file's directory, and
// the --store-tls-* flags (Options.Store.TLS) override it: two gateways
// share one limit through a Redis that speaks TLS only and requires a
// client certificate.
func TestStoreTLS(t *testing.T) {
	e := newEdge(t)
	url := redistest.Server(t, redistest.WithTLS(redistest.TLS{CA: e.ca, AuthClients: true}))
	e.ca.Client(t, "gateway").Write(t, e.dir, "client")
	rule := "rules:\n  - name: one\n    key: [header:X-K]\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n"
	mk := func(name, store string, o Options) *Gateway {
		path := filepath.Join(e.dir, name+".yaml")
		os.WriteFile(path, []byte("upstream: builtin:demo\nstore:\n  url: "+url+"\n"+store+rule), 0o644)
		g, err := New(context.Background(), path, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.proc.Close() })
		return g
	}
	// on_error: deny, so that a 200 says the gateway reached Redis.
	fromFile := mk("a", "  on_error: deny\n  tls: {ca_file: ca.crt, cert_file: client.crt, key_file: client.key}\n", Options{})
	// The file has no client certificate, which this Redis requires: the
	// flags give it.
	fromFlags := mk("b", "  on_error: deny\n  tls: {ca_file: ca.crt}\n", Options{Store: storeconfig.Config{TLS: tlsconfig.Client{
		CertFile: filepath.Join(e.dir, "client.crt"), KeyFile: filepath.Join(e.dir, "client.key"),
	}}})
	for i, step := range []struct {
		g    *Gateway
		key  string
		want int
	}{{fromFile, "k1", 200}, {fromFlags, "k2", 200}, {fromFlags, "k1", 429}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/hello", nil)
		req.Header.Set("X-K", step.key)
		step.g.Handler().ServeHTTP(rec, req)
		if rec.Code != step.want {
			t.Errorf("step %d: %d, want %d\n%s", i, rec.Code, step.want, rec.Body)
		}
		if step.want == 429 && !strings.Contains(rec.Body.String(), "rate limit") {
			t.Errorf("the refusal is not the limit's: %s", rec.Body)
		}
	}
}
