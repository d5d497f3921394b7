package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// A Redis that answers PING but refuses writes (maxmemory with noeviction)
// fails the probe: the breaker stays open while decisions cannot be made,
// rather than closing on a PING and opening again on the next calls.
func TestProbeFailsWhileRedisIsFull(t *testing.T) {
	s := openURL(t, redistest.Server(t))
	ctx := context.Background()
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("probe of a healthy Redis: %v", err)
	}
	if err := s.Client().ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer s.Client().ConfigSet(ctx, "maxmemory", "0")
	if err := s.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("PING while full: %v", err)
	}
	if err := s.Probe(ctx); err == nil {
		t.Fatal("the probe passed while Redis refuses writes")
	}
	if err := s.Client().ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("probe once Redis has room: %v", err)
	}
}

// A Cluster primary that answers PING but refuses commands (CLUSTERDOWN,
// as every node does from a primary's failure until its replica is
// elected; here the node's view lacks a slot) fails its part's probe, and
// only its own; a part that holds no slot is no longer probed (nil).
func TestProbePartAsksWhatDecisionsAsk(t *testing.T) {
	s := openCluster(t)
	ctx := context.Background()
	limit := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 100, Period: time.Second}
	parts := keysByPrimary(t, s, limit, 1)
	var victimKey string
	for _, keys := range parts {
		victimKey = keys[0]
		break
	}
	victim := s.Part(ratekeeper.Request{Key: victimKey, Limit: limit})
	for p := range parts {
		if err := s.ProbePart(ctx, p); err != nil {
			t.Fatalf("probe of %s, healthy: %v", p, err)
		}
	}
	node := redis.NewClient(&redis.Options{Addr: victim})
	defer node.Close()
	slot, err := s.Client().ClusterKeySlot(ctx, s.Key(victimKey, limit.Algorithm)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Do(ctx, "CLUSTER", "DELSLOTS", slot).Err(); err != nil {
		t.Fatal(err)
	}
	defer node.Do(ctx, "CLUSTER", "ADDSLOTS", slot)
	// The node's own state turns to fail at its next cron: poll for it.
	for deadline := time.Now().Add(5 * time.Second); ; {
		info, _ := node.ClusterInfo(ctx).Result()
		if len(info) > 0 && strings.Contains(info, "cluster_state:fail") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's cluster state never failed: %q", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := node.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING of the refusing node: %v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := s.ProbePart(pctx, victim); err == nil {
		t.Fatal("the probe passed on a primary that refuses every command")
	}
	if err := s.ProbePart(ctx, "127.0.0.1:1"); err != nil {
		t.Errorf("probe of an address that holds no slot: %v, want nil (forgotten)", err)
	}
	// A probe out of time says so, rather than that the address holds no
	// slot (which would close its breaker).
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if err := s.ProbePart(done, "127.0.0.1:1"); err == nil {
		t.Error("a probe whose context is done searched on and answered nil")
	}
}

// A client whose key is "probe" keeps its own count: the probe's key is one
// no client key can name.
func TestProbeKeyIsNoClientKey(t *testing.T) {
	for name, url := range map[string]string{"standalone": redistest.Server(t), "cluster": redistest.Cluster(t)} {
		t.Run(name, func(t *testing.T) {
			s := openURL(t, url)
			ctx := context.Background()
			l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: 24 * time.Hour}
			var taken []ratekeeper.Request
			for _, k := range []string{"probe", "probe:0", "probe:1", "probe:2"} {
				req := ratekeeper.Request{Key: k, Limit: l, N: 3}
				if _, err := s.Take(ctx, req); err != nil {
					t.Fatal(err)
				}
				taken = append(taken, req)
			}
			for range 3 {
				if err := s.Probe(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, req := range taken {
				req.N = 0
				d, err := s.Take(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if d.Remaining != 7 {
					t.Errorf("client key %q: %d remaining after the probes, want 7", req.Key, d.Remaining)
				}
			}
		})
	}
}
