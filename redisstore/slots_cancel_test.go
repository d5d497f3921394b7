package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// pauser stops (SIGSTOP) and continues (SIGCONT) the redis-server that
// holds one Redis key.
type pauser func(t *testing.T, s *redisstore.Store, key string) (pause, resume func())

// pauseStandalone pauses the one server in.
func pauseStandalone(in *redistest.Instance) pauser {
	return func(t *testing.T, _ *redisstore.Store, _ string) (func(), func()) {
		t.Cleanup(in.Resume)
		return in.Pause, in.Resume
	}
}

// pauseClusterNode pauses the Cluster primary of key, found by the process
// ID it reports.
func pauseClusterNode(t *testing.T, s *redisstore.Store, key string) (func(), func()) {
	ctx := context.Background()
	node, err := s.Client().(*redis.ClusterClient).MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	info, err := node.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "process_id:")
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	if err != nil {
		t.Fatalf("no process_id in INFO server: %v", err)
	}
	resume := func() { syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(resume) // a stopped node cannot be shut down
	return func() { syscall.Kill(pid, syscall.SIGSTOP) }, resume
}

// An acquire whose caller's deadline passes while Redis is stopped still
// runs once Redis continues. Its slot, which no permit holds, is given
// back soon after, not held for the TTL (30 s here) with the key's only
// slot: the store cancels it in the background.
func TestSlotOfTimedOutAcquireIsGivenBack(t *testing.T) {
	in := redistest.Start(t)
	for _, c := range []struct {
		name  string
		url   string
		pause pauser
	}{
		{"standalone", in.URL(), pauseStandalone(in)},
		{"cluster", redistest.Cluster(t), pauseClusterNode},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, c.url)
			key := fmt.Sprintf("late:%x", rand.Uint64())
			pause, resume := c.pause(t, s, s.SlotKey(key))
			req := ratekeeper.SlotRequest{Key: key, ID: "timed-out", Max: 1, TTL: 30 * time.Second}
			warm := req
			warm.ID = "warm" // loads the script: EVALSHA then runs at once
			if _, err := s.AcquireSlot(context.Background(), warm); err != nil {
				t.Fatal(err)
			}
			if err := s.ReleaseSlot(context.Background(), warm, ratekeeper.Decision{}); err != nil {
				t.Fatal(err)
			}
			pause()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_, err := s.AcquireSlot(ctx, req)
			cancel()
			resume()
			if err == nil {
				t.Fatal("a stopped Redis granted a slot")
			}
			resumed := time.Now()
			ctx = context.Background()
			lim, err := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: 1, TTL: req.TTL})
			if err != nil {
				t.Fatal(err)
			}
			for deadline := resumed.Add(5 * time.Second); ; {
				n, err := s.InFlight(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v after Redis continued, the timed-out acquire still holds the key's slot (TTL %v)", time.Since(resumed), req.TTL)
				}
				time.Sleep(10 * time.Millisecond) // the polling interval
			}
			t.Logf("the slot was free %v after Redis continued", time.Since(resumed))
			p, d, err := lim.TryAcquire(ctx, key)
			if err != nil || p == nil {
				t.Fatalf("the free slot was refused: %+v %v", d, err)
			}
			p.Release(ctx)
		})
	}
}
