package redistest

import (
	"crypto/tls"
	"strconv"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/tlstest"
)

// TestTLS: a standalone server and a sentinel start over TLS, answer a
// client with a certificate from the CA, and refuse one without when
// AuthClients; the sentinel's primary and replica got there over TLS
// (Sentinel waits for both). storeconfig's tests decide on every form.
func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redistest CA")
	opt := WithTLS(TLS{CA: ca, AuthClients: true})
	for _, url := range []string{Server(t, opt), Sentinel(t, opt)} {
		scheme, rest, _ := strings.Cut(url, "://")
		if !strings.HasPrefix(scheme, "rediss") {
			t.Errorf("%s: not a TLS scheme", url)
		}
		_, port, _ := strings.Cut(strings.TrimSuffix(strings.TrimSuffix(rest, "/0"), "/"+MasterName), ":")
		in := &Instance{tls: &tlsFiles{client: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client(t, "c").TLS(t)}}}}
		var err error
		if in.port, err = strconv.Atoi(port); err != nil {
			t.Fatal(url, err)
		}
		if err := in.ping(); err != nil {
			t.Errorf("%s with a client certificate: %v", url, err)
		}
		in.tls.client = &tls.Config{RootCAs: ca.Pool()}
		if err := in.ping(); err == nil {
			t.Errorf("%s answered a client without a certificate", url)
		}
	}
}

// TestSentinel: a clear-text sentinel comes up with its primary and
// replica.
func TestSentinel(t *testing.T) {
	url := Sentinel(t)
	if !strings.HasPrefix(url, "redis+sentinel://127.0.0.1:") || !strings.HasSuffix(url, "/"+MasterName) {
		t.Fatal(url)
	}
}
