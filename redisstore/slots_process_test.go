package redisstore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// Two stores with clients of their own (two instances) sharing one limit
// never hold more than Max in flight between them, on one server and on
// Cluster.
func TestConcurrencyTwoStores(t *testing.T) {
	for _, c := range []struct{ name, url string }{
		{"standalone", redistest.Server(t)},
		{"cluster", redistest.Cluster(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			const limit, goroutines, rounds = 5, 16, 60
			key := fmt.Sprintf("two:%x", rand.Uint64())
			var in, peak, acquired atomic.Int64
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range 2 {
				lim, err := ratekeeper.NewConcurrencyLimiter(open(t, c.url), ratekeeper.Concurrency{Max: limit, TTL: 10 * time.Second, RetryAfter: time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				for range goroutines {
					wg.Go(func() {
						for range rounds {
							p, _, err := lim.Acquire(ctx, key)
							if err != nil {
								t.Error(err)
								return
							}
							n := in.Add(1)
							for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
							}
							acquired.Add(1)
							in.Add(-1)
							if err := p.Release(ctx); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			if got := peak.Load(); got > limit {
				t.Fatalf("peak in flight %d across two stores, limit %d", got, limit)
			}
			if got := acquired.Load(); got != 2*goroutines*rounds {
				t.Fatalf("%d acquired, want %d", got, 2*goroutines*rounds)
			}
		})
	}
}

const slotWorkerEnv = "RATEKEEPER_SLOT_WORKER"

// TestSlotWorker is the process TestConcurrencyKilledHolder kills: it
// takes the slots it is told to, says "held", and holds them (refreshing)
// until killed. It does nothing when run as a test.
func TestSlotWorker(t *testing.T) {
	spec := os.Getenv(slotWorkerEnv)
	if spec == "" {
		t.Skip("run by TestConcurrencyKilledHolder as a worker process")
	}
	var url, key string
	var n int
	var ttlMS int64
	if _, err := fmt.Sscan(spec, &url, &key, &n, &ttlMS); err != nil {
		t.Fatal(err)
	}
	ttl := time.Duration(ttlMS) * time.Millisecond
	ctx := context.Background()
	s, err := redisstore.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: n, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if p, d, err := lim.TryAcquire(ctx, key); err != nil || p == nil {
			t.Fatalf("worker refused: %+v %v", d, err)
		}
	}
	fmt.Println("held")
	select {} // until SIGKILL
}

// An instance killed while it holds slots (a process SIGKILLed: no
// release, no goodbye) holds them still, refreshed, past their first TTL
// while it lives; once dead they come back by themselves, within one TTL
// of the kill and not before the last refresh's lease ends: at least 2/3
// of a TTL after it (refreshes come every third).
func TestConcurrencyKilledHolder(t *testing.T) {
	url := redistest.Server(t)
	const n = 3
	const ttl = 1500 * time.Millisecond
	key := fmt.Sprintf("killed:%x", rand.Uint64())
	cmd := exec.Command(os.Args[0], "-test.run=^TestSlotWorker$", "-test.count=1")
	cmd.Env = append(os.Environ(), slotWorkerEnv+"="+url+" "+key+" "+strconv.Itoa(n)+" "+strconv.FormatInt(ttl.Milliseconds(), 10))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "held" {
		said := lines.Text()
		for lines.Scan() {
			said += "\n" + lines.Text()
		}
		t.Fatalf("worker said %q, not held", said)
	}
	held := time.Now()
	s := open(t, url)
	ctx := context.Background()
	inFlight := func() int {
		v, err := s.InFlight(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Alive, the worker keeps its slots past their first lease: it
	// refreshes them.
	for time.Since(held) < 2*ttl {
		if v := inFlight(); v != n {
			t.Fatalf("%v after taking them, the live worker holds %d slots, want %d", time.Since(held), v, n)
		}
		time.Sleep(20 * time.Millisecond) // the polling interval
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()
	lim, err := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: n, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	deadline := killed.Add(ttl + 500*time.Millisecond)
	for {
		if p, _, err := lim.TryAcquire(ctx, key); err != nil {
			t.Fatal(err)
		} else if p != nil {
			back := time.Since(killed)
			p.Release(ctx)
			if back < 2*ttl/3-50*time.Millisecond {
				t.Fatalf("a dead instance's slot came back %v after the kill, before its lease (at least %v) ended", back, 2*ttl/3)
			}
			if back > ttl+50*time.Millisecond {
				t.Fatalf("a dead instance's slot came back %v after the kill, TTL %v", back, ttl)
			}
			t.Logf("first slot back %v after the kill (TTL %v, refreshed every %v)", back, ttl, ttl/3)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot back %v after the kill, TTL %v", time.Since(killed), ttl)
		}
		time.Sleep(5 * time.Millisecond) // the polling interval
	}
}
