package storeconfig

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/tlstest"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// tlsFiles are a test CA's certificate and a client certificate it
// signed, as files.
type tlsFiles struct {
	ca        *tlstest.CA
	caFile    string
	cert, key string
}

func newTLSFiles(t *testing.T) tlsFiles {
	ca := tlstest.NewCA(t, "store CA")
	dir := t.TempDir()
	f := tlsFiles{ca: ca, caFile: ca.Write(t, dir, "ca")}
	f.cert, f.key = ca.Client(t, "ratekeeper").Write(t, dir, "client")
	return f
}

// openTLS opens c (on_error deny, so that a refusal of a fresh key says
// Redis did not answer) and returns the store, its go-redis client and
// what it logged.
func openTLS(t *testing.T, c Config) (ratekeeper.Store, *redisstore.Store, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	c.OnError, c.Timeout = "deny", time.Second
	s, closer, err := Open(context.Background(), c, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	return s, s.(*failsafe.Store).Primary().(*redisstore.Store), &logs
}

// decidesInRedis takes keys twice each from a limit of one: the first
// passes and the second is refused only if the count is in Redis (a
// refusal by on_error deny would refuse the first).
func decidesInRedis(t *testing.T, s ratekeeper.Store, keys ...string) {
	t.Helper()
	lim := ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 1, Period: time.Hour}
	for _, k := range keys {
		first, err := s.Take(context.Background(), ratekeeper.Request{Key: k, Limit: lim, N: 1})
		if err != nil || !first.Allowed {
			t.Fatalf("%s, first: %+v %v (Redis did not answer?)", k, first, err)
		}
		if second, _ := s.Take(context.Background(), ratekeeper.Request{Key: k, Limit: lim, N: 1}); second.Allowed {
			t.Fatalf("%s, second: allowed, so not counted in Redis", k)
		}
	}
	if st := s.(*failsafe.Store).Stats(); st.Errors != 0 {
		t.Fatalf("store errors: %+v", st)
	}
}

// refusedByPolicy: a decision on a fresh key under on_error deny is
// refused, and counted as a fallback: the store did not answer.
func refusedByPolicy(t *testing.T, s ratekeeper.Store) {
	t.Helper()
	lim := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: time.Hour}
	d, err := s.Take(context.Background(), ratekeeper.Request{Key: "fresh", Limit: lim, N: 1})
	if err != nil || d.Allowed {
		t.Fatalf("%+v %v: want a refusal by on_error deny", d, err)
	}
	if st := s.(*failsafe.Store).Stats(); st.FallbackDenied < 1 {
		t.Fatalf("not decided by on_error: %+v", st)
	}
}

// TestOpenRedisTLS: rediss:// to a real TLS-only redis-server, verified
// with a CA file; a server that requires client certificates answers only
// with one (without, the store decides by on_error and Ping fails); a
// server name the certificate lacks, or the system's CAs, fail
// verification.
func TestOpenRedisTLS(t *testing.T) {
	f := newTLSFiles(t)
	open := redistest.Server(t, redistest.WithTLS(redistest.TLS{CA: f.ca}))
	mutual := redistest.Server(t, redistest.WithTLS(redistest.TLS{CA: f.ca, AuthClients: true}))

	t.Run("ca_file", func(t *testing.T) {
		s, _, _ := openTLS(t, Config{URL: open, TLS: tlsconfig.Client{CAFile: f.caFile}})
		decidesInRedis(t, s, "ca-only")
	})
	t.Run("client certificate", func(t *testing.T) {
		s, rs, _ := openTLS(t, Config{URL: mutual, TLS: tlsconfig.Client{CAFile: f.caFile, CertFile: f.cert, KeyFile: f.key}})
		if err := rs.Client().Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		decidesInRedis(t, s, "mutual")
	})
	// The refusals below wait for go-redis's dial retries: side by side.
	t.Run("no client certificate", func(t *testing.T) {
		t.Parallel()
		s, rs, logs := openTLS(t, Config{URL: mutual, TLS: tlsconfig.Client{CAFile: f.caFile}})
		if !strings.Contains(logs.String(), "does not answer") {
			t.Errorf("no warning at start: %s", logs)
		}
		if err := rs.Client().Ping(context.Background()).Err(); err == nil {
			t.Fatal("Ping answered without a client certificate")
		}
		refusedByPolicy(t, s)
	})
	for _, c := range []struct {
		name string
		tls  tlsconfig.Client
		want string
	}{
		{"wrong server_name", tlsconfig.Client{CAFile: f.caFile, CertFile: f.cert, KeyFile: f.key, ServerName: "redis.wrong.example"}, "redis.wrong.example"},
		{"the system's CAs", tlsconfig.Client{CertFile: f.cert, KeyFile: f.key}, "unknown authority"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, rs, _ := openTLS(t, Config{URL: mutual, TLS: c.tls})
			err := rs.Client().Ping(context.Background()).Err()
			var verr *tls.CertificateVerificationError
			if !errors.As(err, &verr) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Ping: %v, want a verification error naming %q", err, c.want)
			}
			refusedByPolicy(t, s)
		})
	}
}

// TestOpenRedisTLSSentinelCluster: rediss+sentinel:// and rediss+cluster://
// decide in real TLS deployments that require client certificates: the
// sentinel and the primary it names, every node of a cluster.
func TestOpenRedisTLSSentinelCluster(t *testing.T) {
	f := newTLSFiles(t)
	opt := redistest.WithTLS(redistest.TLS{CA: f.ca, AuthClients: true})
	tc := tlsconfig.Client{CAFile: f.caFile, CertFile: f.cert, KeyFile: f.key}
	t.Run("sentinel", func(t *testing.T) {
		s, _, _ := openTLS(t, Config{URL: redistest.Sentinel(t, opt), TLS: tc})
		decidesInRedis(t, s, "sentinel")
	})
	t.Run("cluster", func(t *testing.T) {
		s, rs, _ := openTLS(t, Config{URL: redistest.Cluster(t, opt), TLS: tc})
		keys := make([]string, 12) // over the three nodes' slots
		for i := range keys {
			keys[i] = fmt.Sprint("cluster-", i)
		}
		decidesInRedis(t, s, keys...)
		var nodes atomic.Int32 // ForEachShard calls in parallel
		err := rs.Client().(*redis.ClusterClient).ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error {
			nodes.Add(1)
			return c.Ping(ctx).Err()
		})
		if err != nil || nodes.Load() != 3 {
			t.Fatalf("%d nodes answered, want 3: %v", nodes.Load(), err)
		}
	})
}
