package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/shared"
)

func openCluster(t *testing.T) *Store { return openURL(t, redistest.Cluster(t)) }

func openURL(t *testing.T, url string, opts ...Option) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// keysByPrimary returns n keys for each of the Cluster's primaries, by
// address.
func keysByPrimary(t *testing.T, s *Store, l ratekeeper.Limit, n int) map[string][]string {
	t.Helper()
	by := map[string][]string{}
	for i := 0; i < 100*n; i++ {
		k := fmt.Sprintf("node-%d", i)
		if p := s.Part(ratekeeper.Request{Key: k, Limit: l}); p != "" && len(by[p]) < n {
			by[p] = append(by[p], k)
		}
	}
	if len(by) != 3 {
		t.Fatalf("keys on %d primaries, want 3", len(by))
	}
	return by
}

// A primary's batcher retired while calls use it (its replica took over)
// loses none of them: those not yet sent go again to the key's primary.
// Here every batcher is retired over and over (the primaries' list is made
// empty) under concurrent calls on every primary.
func TestRetiredBatcherLosesNoCall(t *testing.T) {
	s := openCluster(t)
	// A day's window, which the test crosses once in 40,000 runs.
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1_000_000, Period: 24 * time.Hour}
	by := keysByPrimary(t, s, l, 4)
	var made atomic.Int64
	s.pipe.masters = func(context.Context) (map[string]bool, error) {
		made.Add(1)
		return map[string]bool{}, nil
	}
	ctx := context.Background()
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.pipe.nodes.Range(func(k, v any) bool {
				s.pipe.retire(k.(string), v.(*batcher))
				return true
			})
			time.Sleep(time.Millisecond) // churn, not a wait for a condition
		}
	})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, keys := range by {
		for _, k := range keys {
			wg.Go(func() {
				for range 300 {
					d, err := s.Take(ctx, ratekeeper.Request{Key: k, Limit: l, N: 1})
					if err != nil || !d.Allowed {
						if failed.Add(1) < 5 {
							t.Errorf("%s: %+v %v", k, d, err)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	if made.Load() == 0 {
		t.Fatal("no batcher was made after a retirement: the test tested nothing")
	}
	// Every call counted once.
	for _, keys := range by {
		for _, k := range keys {
			d, err := s.Take(ctx, ratekeeper.Request{Key: k, Limit: l, N: 0})
			if err != nil {
				t.Fatal(err)
			}
			if taken := l.Capacity() - d.Remaining; taken != 300 {
				t.Errorf("%s: %d taken, want 300", k, taken)
			}
		}
	}
}

// A shared-mode call across the Cluster whose one primary does not answer
// gets the other primaries' replies, and its own items fail alone by its
// deadline; before, the whole call failed, and the counts the live
// primaries had applied were sent again by the next sync.
func TestSharedCallFailsByPrimary(t *testing.T) {
	s := openCluster(t)
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
	by := keysByPrimary(t, s, l, 3)
	var victim string
	for p := range by {
		victim = p
		break
	}
	ctx := context.Background()
	node := redis.NewClient(&redis.Options{Addr: victim})
	defer node.Close()
	if err := node.Do(ctx, "CLIENT", "PAUSE", 2000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	defer node.Do(ctx, "CLIENT", "UNPAUSE")
	var items []shared.Item
	for _, keys := range by {
		for _, k := range keys {
			items = append(items, shared.Item{Key: k, Limit: l, N: 2, At: time.Now().UnixMicro()})
		}
	}
	const deadline = 300 * time.Millisecond
	cctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	if err := (remote{s}).Add(cctx, items); err != nil {
		t.Fatalf("the call failed as a whole: %v", err)
	}
	if took := time.Since(start); took > deadline+200*time.Millisecond {
		t.Errorf("took %v, past its deadline %v", took, deadline)
	}
	for _, it := range items {
		onVictim := s.Part(ratekeeper.Request{Key: it.Key, Limit: l}) == victim
		switch {
		case onVictim && !errors.Is(it.Err, context.DeadlineExceeded) && !errors.Is(it.Err, os.ErrDeadlineExceeded):
			// Either the batcher's deadline or the connection's: go-redis
			// sets the socket's deadline from the context, and under load
			// the write can be the step that meets it (CI saw "write tcp:
			// i/o timeout").
			t.Errorf("%s on the paused primary: %v, want its deadline", it.Key, it.Err)
		case !onVictim && it.Err != nil:
			t.Errorf("%s on a live primary: %v", it.Key, it.Err)
		case !onVictim && it.State.Window.Count != 2:
			t.Errorf("%s on a live primary: count %d, want 2", it.Key, it.State.Window.Count)
		}
	}
}

// TestClusterDeadPrimaryHoldsNoOtherCalls: on a Cluster whose one primary
// stops answering (CLIENT PAUSE), calls batched with that primary's calls
// still get the other primaries' answers at once. With one pipeline for a
// whole batch they waited out their deadline beside the paused primary's
// and failed, which opened the live primaries' circuit breakers too and
// made the p99 the timeout while a primary was down (bench/faults).
func TestClusterDeadPrimaryHoldsNoOtherCalls(t *testing.T) {
	s := openCluster(t)
	ctx := context.Background()
	limit := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000000, Period: time.Second}
	req := func(k string) ratekeeper.Request { return ratekeeper.Request{Key: k, Limit: limit, N: 1} }
	byPart := keysByPrimary(t, s, limit, 8)
	var victim string
	for p := range byPart {
		victim = p
		break
	}
	node := redis.NewClient(&redis.Options{Addr: victim})
	defer node.Close()
	// Three rounds wait out the paused primary's deadline: it stays
	// paused through them. Half the deadline is a loaded machine's
	// margin for the live primaries' answers (300 ms seen at load 10).
	const deadline = 1500 * time.Millisecond
	if err := node.Do(ctx, "CLIENT", "PAUSE", (4 * deadline).Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	defer node.Do(ctx, "CLIENT", "UNPAUSE")
	var wg sync.WaitGroup
	type outcome struct {
		key  string
		took time.Duration
		err  error
	}
	results := make(chan outcome, 64)
	// Many callers at once, so that calls for every primary share batches.
	for round := 0; round < 3; round++ {
		for p, keys := range byPart {
			for _, k := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					_, err := s.TakeBy(ctx, req(k), start.Add(deadline))
					if p != victim {
						results <- outcome{k, time.Since(start), err}
					}
				}()
			}
		}
		wg.Wait()
	}
	close(results)
	n := 0
	for o := range results {
		n++
		if o.err != nil || o.took > deadline/2 {
			t.Errorf("%s on a live primary: %v after %v, beside a paused one", o.key, o.err, o.took)
		}
	}
	if n == 0 {
		t.Fatal("no call on a live primary")
	}
}

// answers records what a Store reports to OnAnswer.
type answers struct {
	mu sync.Mutex
	by map[string]int
}

func listen(s *Store) *answers {
	a := &answers{by: map[string]int{}}
	_ = s.OnAnswer(func(part string) {
		a.mu.Lock()
		a.by[part]++
		a.mu.Unlock()
	})
	return a
}

func (a *answers) count(part string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.by[part]
}

// TestAnswersNameTheirPrimary: the store reports each call Redis answered
// with the primary that answered it, as Part names it, and no call that
// failed (the failsafe store resets a primary's count of failures on its
// answers: an answer reported for the wrong primary would keep a dead
// one's breaker closed). With and without the automatic pipeline, and in
// sync mode the background syncs' answers.
func TestAnswersNameTheirPrimary(t *testing.T) {
	url := redistest.Cluster(t)
	ctx := context.Background()
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"pipelined", nil},
		{"unpipelined", []Option{WithAutoPipeline(false)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openURL(t, url, c.opts...)
			by := keysByPrimary(t, s, l, 1)
			a := listen(s)
			for p, keys := range by {
				before := map[string]int{}
				for q := range by {
					before[q] = a.count(q)
				}
				if _, err := s.Take(ctx, ratekeeper.Request{Key: keys[0], Limit: l, N: 1}); err != nil {
					t.Fatal(err)
				}
				for q := range by {
					want := before[q]
					if q == p {
						want++
					}
					if got := a.count(q); got != want {
						t.Errorf("a call on %s: %d answers reported for %s, want %d", p, got-before[q], q, want-before[q])
					}
				}
			}
			var victim string
			for p := range by {
				victim = p
				break
			}
			node := redis.NewClient(&redis.Options{Addr: victim})
			defer node.Close()
			if err := node.Do(ctx, "CLIENT", "PAUSE", 1000, "ALL").Err(); err != nil {
				t.Fatal(err)
			}
			defer node.Do(ctx, "CLIENT", "UNPAUSE")
			before := a.count(victim)
			if _, err := s.TakeBy(ctx, ratekeeper.Request{Key: by[victim][0], Limit: l, N: 1}, time.Now().Add(100*time.Millisecond)); err == nil {
				t.Fatal("a call on a paused primary succeeded")
			}
			if got := a.count(victim); got != before {
				t.Errorf("a call that failed on %s was reported answered", victim)
			}
		})
	}
	t.Run("sync", func(t *testing.T) {
		s := openURL(t, url, WithMode(Sync, 10*time.Millisecond))
		by := keysByPrimary(t, s, l, 1)
		a := listen(s)
		for _, keys := range by {
			if _, err := s.Take(ctx, ratekeeper.Request{Key: keys[0], Limit: l, N: 1}); err != nil {
				t.Fatal(err)
			}
		}
		// Each primary's keys are synced in the background, and answered.
		deadline := time.Now().Add(5 * time.Second)
		for p := range by {
			for a.count(p) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("no sync answered on %s within 5s: %v", p, a.by)
				}
				time.Sleep(5 * time.Millisecond) // polling, bounded above
			}
		}
	})
}

// Every listener hears each answer until its own stop (two failsafe
// stores on one Redis store: with one listener, the first store's breaker
// heard no answer once the second was made, and its count of failures only
// grew).
func TestAnswerListenersStopApart(t *testing.T) {
	s := openURL(t, redistest.Server(t))
	ctx := context.Background()
	var one, two atomic.Int64
	stopOne := s.OnAnswer(func(string) { one.Add(1) })
	stopTwo := s.OnAnswer(func(string) { two.Add(1) })
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
	take := func() {
		t.Helper()
		if _, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	take()
	if one.Load() != 1 || two.Load() != 1 {
		t.Fatalf("answers heard: %d and %d, want 1 each", one.Load(), two.Load())
	}
	stopOne()
	stopOne() // a second stop changes nothing
	take()
	if one.Load() != 1 || two.Load() != 2 {
		t.Fatalf("after the first stopped: %d and %d, want 1 and 2", one.Load(), two.Load())
	}
	stopTwo()
	take()
	if one.Load() != 1 || two.Load() != 2 || s.listeners.Load() != nil {
		t.Fatalf("after both stopped: %d and %d heard, listeners %v", one.Load(), two.Load(), s.listeners.Load())
	}
}
