package failsafe_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/redis/go-redis/v9"
)

// watched is the Redis store, remembering when it last answered. Unless
// byDeadline, its TakeBy bounds Take by a context, as a NetworkStore with
// nothing cheaper would; else it is the Redis store's own, as serve runs it.
type watched struct {
	*redisstore.Store
	byDeadline bool
	lastOK     atomic.Int64 // unix ns
}

func (w *watched) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	return w.TakeBy(ctx, req, time.Time{})
}

func (w *watched) TakeBy(ctx context.Context, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error) {
	if !w.byDeadline && !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		deadline = time.Time{}
	}
	d, err := w.Store.TakeBy(ctx, req, deadline)
	if err == nil {
		w.lastOK.Store(time.Now().UnixNano())
	}
	return d, err
}

var (
	_ failsafe.NetworkStore = (*watched)(nil)
	_ failsafe.NetworkStore = (*redisstore.Store)(nil) // serve bounds its Redis calls by TakeBy
)

// call is one decision under load.
type call struct {
	start, end time.Time
	allowed    bool
	err        error
}

// TestRedisKilledUnderLoad kills redis-server under load from many
// goroutines, then hangs it (SIGSTOP), and checks for each policy: no call
// blocks longer than the timeout plus a margin, decisions while it is gone
// follow the policy, decisions come from Redis again within a second of its
// return, and no goroutine is left behind.
func TestRedisKilledUnderLoad(t *testing.T) {
	const (
		timeout = 50 * time.Millisecond
		margin  = 150 * time.Millisecond // scheduling on a loaded 2-core machine under -race
	)
	for _, tt := range []struct {
		policy failsafe.Policy
		limit  ratekeeper.Limit
		// ok checks the decisions made while Redis was gone.
		ok func(t *testing.T, allowed, refused int)
	}{
		{failsafe.Allow, ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Hour},
			func(t *testing.T, allowed, refused int) {
				if refused > 0 {
					t.Errorf("allow policy: %d refused while Redis was gone", refused)
				}
			}},
		{failsafe.Deny, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000000, Period: time.Second},
			func(t *testing.T, allowed, refused int) {
				if allowed > 0 {
					t.Errorf("deny policy: %d allowed while Redis was gone", allowed)
				}
			}},
		{failsafe.Local, ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Hour},
			func(t *testing.T, allowed, refused int) {
				// 10 per hour over 2 instances: the local store allows 5
				// per outage... and keeps its count across both outages.
				if allowed > 5 {
					t.Errorf("local policy: %d allowed while Redis was gone, want at most 5", allowed)
				}
			}},
	} {
		for _, by := range []bool{false, true} {
			name := string(tt.policy) + "/context"
			if by {
				name = string(tt.policy) + "/deadline" // TakeBy, as serve runs it
			}
			t.Run(name, func(t *testing.T) {
				before := runtime.NumGoroutine()
				srv := redistest.Start(t)
				ctx := context.Background()
				// Without the denial cache, which would answer the refused
				// client itself during the outages (as Redis would have):
				// this test is of what failsafe decides when Redis cannot.
				rs, err := redisstore.Open(ctx, srv.URL(), redisstore.WithDenialCache(false))
				if err != nil {
					t.Fatal(err)
				}
				w := &watched{Store: rs, byDeadline: by}
				fs := failsafe.New(w, failsafe.WithLocalStore(memstore.New()), failsafe.WithTimeout(timeout), failsafe.WithPolicy(tt.policy),
					failsafe.WithInstances(2), failsafe.WithBreaker(5, 100*time.Millisecond))
				lim, err := ratekeeper.New(fs, tt.limit)
				if err != nil {
					t.Fatal(err)
				}

				var (
					mu    sync.Mutex
					calls []call
					stop  atomic.Bool
					wg    sync.WaitGroup
				)
				for g := 0; g < 16; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var mine []call
						for i := 0; i < 200000 && !stop.Load(); i++ {
							c := call{start: time.Now()}
							d, err := lim.Allow(ctx, "client")
							c.end, c.allowed, c.err = time.Now(), d.Allowed, err
							mine = append(mine, c)
							// Pace the load (16 goroutines, up to ~16k calls/s), so
							// that the test measures the store, not the scheduler of
							// a 2-core machine running 16 spinning goroutines.
							time.Sleep(time.Millisecond)
						}
						mu.Lock()
						calls = append(calls, mine...)
						mu.Unlock()
					}()
				}
				waitFor := func(what string, d time.Duration, cond func() bool) time.Duration {
					t.Helper()
					start := time.Now()
					for !cond() {
						if time.Since(start) > d {
							t.Fatalf("%s: not within %v", what, d)
						}
						time.Sleep(time.Millisecond)
					}
					return time.Since(start)
				}
				servedSince := func(at time.Time) func() bool {
					return func() bool { return w.lastOK.Load() > at.UnixNano() }
				}

				began := time.Now()
				waitFor("decisions from Redis", 5*time.Second, servedSince(time.Now()))
				time.Sleep(200 * time.Millisecond) // load against a healthy server

				var outages []outage
				recover := func(kind string, back time.Time) {
					d := waitFor("decisions from Redis after "+kind, time.Second, servedSince(back))
					t.Logf("%s: decisions from Redis again %v after its return", kind, d.Round(time.Millisecond))
				}

				// Kill it, keep the load on, bring it back.
				from := time.Now()
				srv.Kill()
				time.Sleep(500 * time.Millisecond)
				outages = append(outages, outage{from, time.Now()})
				srv.Restart()
				recover("kill", time.Now())

				// Hang it: calls now wait for the timeout, until the breaker opens.
				from = time.Now()
				srv.Pause()
				time.Sleep(500 * time.Millisecond)
				outages = append(outages, outage{from, time.Now()})
				srv.Resume()
				recover("pause", time.Now())

				time.Sleep(100 * time.Millisecond)
				stop.Store(true)
				wg.Wait()

				var worst, worstAt time.Duration
				allowed, refused := 0, 0
				for _, c := range calls {
					if c.err != nil {
						t.Fatalf("call error: %v", c.err)
					}
					if c.end.Sub(c.start) > worst {
						worst = c.end.Sub(c.start)
						worstAt = c.start.Sub(began)
					}
					for _, o := range outages {
						// Decisions wholly inside an outage, after in-flight ones drained.
						if c.start.After(o.from.Add(timeout+margin)) && c.end.Before(o.to) {
							if c.allowed {
								allowed++
							} else {
								refused++
							}
						}
					}
				}
				st := fs.Stats()
				t.Logf("%d calls, slowest %v (at %v; outages %v); during outages %d allowed, %d refused; stats %+v", len(calls), worst.Round(time.Millisecond), worstAt.Round(time.Millisecond), outagesSince(began, outages), allowed, refused, st)
				if worst > timeout+margin {
					t.Errorf("a call took %v, more than the timeout %v + %v", worst, timeout, margin)
				}
				if allowed+refused == 0 {
					t.Fatal("no decisions during the outages")
				}
				tt.ok(t, allowed, refused)
				if st.BreakerOpens < 2 {
					t.Errorf("breaker opened %d times over two outages: %+v", st.BreakerOpens, st)
				}
				// With Redis healthy the breaker closes at its next probe. A
				// call slowed past the timeout by a loaded machine after
				// the last recovery may have opened it again meanwhile, so
				// ask until it closes rather than reading it once.
				closeBy := time.Now().Add(5 * time.Second)
				for fs.Stats().Breaker != failsafe.Closed {
					if time.Now().After(closeBy) {
						t.Fatalf("the breaker stays open with Redis back: %+v", fs.Stats())
					}
					lim.Allow(ctx, "client")
					time.Sleep(10 * time.Millisecond)
				}

				fs.Close()
				rs.Close()
				srv.Kill()
				noGoroutinesPast(t, before)
			})
		}
	}
}

type outage struct{ from, to time.Time }

func outagesSince(t0 time.Time, os []outage) []string {
	var s []string
	for _, o := range os {
		s = append(s, o.from.Sub(t0).Round(time.Millisecond).String()+"-"+o.to.Sub(t0).Round(time.Millisecond).String())
	}
	return s
}

// TestSparseTrafficDuringOutage sends requests sparser than the breaker's
// cool-down, as a quiet API gets them, through a redis-server that is
// killed and restarted, then hung (SIGSTOP) and resumed. Once the breaker
// has opened, no request waits on Redis: each returns well within the
// timeout, since the probes that find Redis still gone run in the
// background; and after Redis returns, decisions come from it again within
// a bounded time. (Before the probes ran in the background, each of these
// requests found the cool-down over and was itself the probe: against the
// hung server, each waited out the timeout.)
func TestSparseTrafficDuringOutage(t *testing.T) {
	const (
		// A timeout long enough that a request waiting on Redis cannot
		// pass for one that does not, on a loaded machine under -race.
		timeout  = 500 * time.Millisecond
		cooldown = 100 * time.Millisecond
		every    = 200 * time.Millisecond // twice the cool-down
		backBy   = 2 * time.Second
		during   = 8 // requests per outage once the breaker is open
	)
	before := runtime.NumGoroutine()
	srv := redistest.Start(t)
	ctx := context.Background()
	rs, err := redisstore.Open(ctx, srv.URL(), redisstore.WithDenialCache(false))
	if err != nil {
		t.Fatal(err)
	}
	fs := failsafe.New(rs, failsafe.WithTimeout(timeout), failsafe.WithBreaker(2, cooldown), failsafe.WithPolicy(failsafe.Deny))
	limit := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000000, Period: time.Second}
	take := func() (ratekeeper.Decision, time.Duration) {
		t.Helper()
		start := time.Now()
		d, err := fs.Take(ctx, ratekeeper.Request{Key: "client", Limit: limit, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d, time.Since(start)
	}
	if d, _ := take(); !d.Allowed || d.Fallback != ratekeeper.NoFallback {
		t.Fatalf("Redis up: %+v", d)
	}
	for _, o := range []struct {
		name       string
		stop, back func()
	}{
		{"kill", srv.Kill, srv.Restart},
		{"pause", srv.Pause, srv.Resume},
	} {
		o.stop()
		st := fs.Stats()
		// Until the breaker opens, a request may wait up to the timeout.
		for n := 0; fs.Stats().BreakerOpens == st.BreakerOpens; n++ {
			if n == 10 {
				t.Fatalf("%s: the breaker is not open after %d requests: %+v", o.name, n, fs.Stats())
			}
			take()
			time.Sleep(every)
		}
		var slowest time.Duration
		for range during {
			// No wait on Redis: the open breaker answers without asking
			// it. Counted, not timed: a loaded machine stalled a call
			// 390ms once.
			sc := fs.Stats().ShortCircuits
			d, took := take()
			slowest = max(slowest, took)
			if fs.Stats().ShortCircuits != sc+1 {
				t.Errorf("%s: with the breaker open a request was not short-circuited (took %v): %+v", o.name, took, fs.Stats())
			}
			if d.Allowed || d.Fallback != ratekeeper.FallbackUncounted {
				t.Errorf("%s: %+v, want refused by the deny policy", o.name, d)
			}
			time.Sleep(every)
		}
		mid := fs.Stats()
		if mid.ProbeFailures <= st.ProbeFailures || mid.Errors > st.Errors+2 {
			t.Errorf("%s: probes failed %d times, calls %d; want probes in the background, no calls: %+v", o.name, mid.ProbeFailures-st.ProbeFailures, mid.Errors-st.Errors, mid)
		}
		o.back()
		back := time.Now()
		for {
			to := fs.Stats().Timeouts
			d, took := take()
			if fs.Stats().Timeouts != to {
				t.Errorf("%s: after Redis returned a request waited out the timeout (took %v)", o.name, took)
			}
			if d.Fallback == ratekeeper.NoFallback {
				if !d.Allowed {
					t.Errorf("%s: Redis refused %+v", o.name, d)
				}
				break
			}
			if time.Since(back) > backBy {
				t.Fatalf("%s: no decision from Redis within %v of its return: %+v", o.name, backBy, fs.Stats())
			}
			time.Sleep(every)
		}
		t.Logf("%s: %d requests every %v with the breaker open, the slowest %v; decisions from Redis again %v after its return", o.name, during, every, slowest.Round(time.Microsecond), time.Since(back).Round(time.Millisecond))
	}
	t.Logf("stats %+v", fs.Stats())
	fs.Close()
	rs.Close()
	srv.Kill()
	noGoroutinesPast(t, before)
}

// noGoroutinesPast waits, up to a deadline, for the goroutines to come
// back to before, and fails t with their stacks if they do not.
func noGoroutinesPast(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // polling, bounded above
	}
}

// TestClusterPrimaryDownAlone: on a real Cluster, one primary that stops
// answering (CLIENT PAUSE) opens its own breaker: its keys then go to the
// policy at once while the other primaries' keys keep Redis's decisions,
// without waiting; once it answers again its probe closes the breaker.
// With one breaker for the store, the live primaries' successes reset the
// count of consecutive failures, and every call on the paused primary
// waited out the timeout.
func TestClusterPrimaryDownAlone(t *testing.T) {
	const (
		timeout = 400 * time.Millisecond
		bound   = 200 * time.Millisecond // what the loop leaves of the pause for its last round
		pause   = 4 * time.Second
	)
	url := redistest.Cluster(t)
	ctx := context.Background()
	rs, err := redisstore.Open(ctx, url, redisstore.WithDenialCache(false))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	fs := failsafe.New(rs, failsafe.WithTimeout(timeout), failsafe.WithBreaker(3, 100*time.Millisecond), failsafe.WithPolicy(failsafe.Deny))
	defer fs.Close()
	limit := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000000, Period: time.Second}
	reqOf := func(key string) ratekeeper.Request { return ratekeeper.Request{Key: key, Limit: limit, N: 1} }
	// A key on the victim and one on each other primary.
	byPart := map[string]string{}
	for i := 0; len(byPart) < 3 && i < 1000; i++ {
		k := fmt.Sprintf("client-%d", i)
		if p := rs.Part(reqOf(k)); p != "" && byPart[p] == "" {
			byPart[p] = k
		}
	}
	if len(byPart) != 3 {
		t.Fatalf("keys found on %d primaries, want 3: %v", len(byPart), byPart)
	}
	var victim, victimKey string
	var live []string
	for p, k := range byPart {
		if victim == "" {
			victim, victimKey = p, k
		} else {
			live = append(live, k)
		}
	}
	take := func(key string) (ratekeeper.Decision, time.Duration) {
		t.Helper()
		start := time.Now()
		d, err := fs.Take(ctx, reqOf(key))
		if err != nil {
			t.Fatal(err)
		}
		return d, time.Since(start)
	}
	for _, k := range append(live, victimKey) {
		if d, _ := take(k); d.Fallback != ratekeeper.NoFallback {
			t.Fatalf("%s before the pause: %+v", k, d)
		}
	}
	// liveTake: a live primary's key is decided by Redis. A call the
	// machine stalled past the timeout falls back; it is tried again, and
	// three in a row fail the test.
	liveTake := func(key, when string) {
		t.Helper()
		var d ratekeeper.Decision
		var took time.Duration
		for range 3 {
			if d, took = take(key); d.Fallback == ratekeeper.NoFallback {
				return
			}
		}
		t.Fatalf("%s on a live primary %s: %+v in %v, three times", key, when, d, took)
	}

	node := redis.NewClient(&redis.Options{Addr: victim})
	defer node.Close()
	if err := node.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	// Until its breaker opens, a call on the victim waits out the timeout;
	// the others' calls in between succeed.
	for n := 0; fs.Stats().Breaker != failsafe.Open; n++ {
		if n == 10 {
			t.Fatalf("the victim's breaker is not open after %d calls: %+v", n, fs.Stats())
		}
		take(victimKey)
		for _, k := range live {
			liveTake(k, "while the victim fails")
		}
	}
	// Open: the victim's keys go to the policy at once, the others' to
	// Redis, until the pause nearly ends.
	checked := 0
	for time.Since(paused) < pause-timeout-bound {
		// At once: the open breaker answers without asking the primary,
		// counted, not timed (a loaded machine stalled a call 390ms).
		before := fs.Stats().ShortCircuits
		if d, _ := take(victimKey); d.Fallback != ratekeeper.FallbackUncounted || fs.Stats().ShortCircuits != before+1 {
			t.Fatalf("the victim's key with its breaker open: %+v, short circuits %d after %d", d, fs.Stats().ShortCircuits, before)
		}
		for _, k := range live {
			liveTake(k, "with the victim's breaker open")
		}
		checked++
		time.Sleep(10 * time.Millisecond) // pacing the checks, not waiting for a condition
	}
	if checked == 0 {
		t.Fatal("the breaker took the whole pause to open")
	}
	// Back: the victim's probe closes its breaker.
	deadline := paused.Add(pause + 5*time.Second)
	for {
		d, _ := take(victimKey)
		if d.Fallback == ratekeeper.NoFallback {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the victim's key still falls back 5s after the pause ended: %+v", fs.Stats())
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded above
	}
	if st := fs.Stats(); st.Breaker != failsafe.Closed || st.BreakerOpens != 1 {
		t.Fatalf("after the pause: %+v, want closed after one opening", st)
	}
	t.Logf("%d rounds with the victim's breaker open; stats %+v", checked, fs.Stats())
}

// TestLocalDecisionsHideNoFailure: decisions the Redis store makes without
// asking Redis (its denial cache in exact mode, a leased quota's refusals in
// lease mode) say nothing of Redis's health. Counted as Redis's successes,
// they reset the breaker's count of failures, so that while Redis did not
// answer, a refused client's requests between the others' kept the breaker
// closed and every other request waited out the timeout. The breaker must
// open after its threshold of failures however many local decisions come
// between them.
func TestLocalDecisionsHideNoFailure(t *testing.T) {
	const (
		timeout   = 100 * time.Millisecond
		threshold = 3
	)
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, mode := range []redisstore.Mode{redisstore.Exact, redisstore.Lease} {
		t.Run(string(mode), func(t *testing.T) {
			rs, err := redisstore.Open(ctx, srv.URL(), redisstore.WithMode(mode, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			// A cool-down longer than the test: no probe closes the breaker
			// while Redis is stopped.
			fs := failsafe.New(rs, failsafe.WithTimeout(timeout), failsafe.WithBreaker(threshold, time.Minute), failsafe.WithPolicy(failsafe.Deny))
			defer fs.Close()
			limit := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Hour}
			take := func(key string) ratekeeper.Decision {
				t.Helper()
				d, err := fs.Take(ctx, ratekeeper.Request{Key: key, Limit: limit, N: 1})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			refused := "refused-" + string(mode)
			take(refused)
			if d := take(refused); d.Allowed || d.Fallback != ratekeeper.NoFallback {
				t.Fatalf("the second request of a limit of 1: %+v, want refused by Redis", d)
			}
			srv.Pause()
			defer srv.Resume()
			for n := 0; fs.Stats().BreakerOpens == 0; n++ {
				if n == 3*threshold {
					t.Fatalf("the breaker is not open after %d requests that waited out the timeout: %+v", n, fs.Stats())
				}
				// Refused without asking Redis, as it was before it stopped...
				if d := take(refused); d.Allowed || d.Fallback != ratekeeper.NoFallback {
					t.Fatalf("the refused key while Redis is stopped: %+v, want refused locally", d)
				}
				// ...and a new key, which needs Redis, which does not answer.
				if d := take(fmt.Sprintf("new-%d", n)); d.Fallback != ratekeeper.FallbackUncounted {
					t.Fatalf("a new key while Redis is stopped: %+v, want the policy's", d)
				}
			}
			if st := fs.Stats(); st.Errors != threshold {
				t.Errorf("the breaker opened after %d errors, want %d: %+v", st.Errors, threshold, st)
			}
			srv.Resume()
		})
	}
}

// TestSyncModeWaitsOnceForAStoppedRedis: in sync mode, once a key's sync
// has gone unanswered within the failsafe store's timeout, the key's next
// decisions are made at once from what the instance knows (until the
// stale bound), not each after waiting out the timeout on a sync of its
// own; the Redis store marks the failsafe's deadline as the store's own
// bound (shared.ErrTimeout), which a caller's own deadline is not.
func TestSyncModeWaitsOnceForAStoppedRedis(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		bound   = 100 * time.Millisecond // a third of the timeout; a local decision takes microseconds
	)
	srv := redistest.Start(t)
	ctx := context.Background()
	// A sync period long enough that the loop does not sync during the
	// test: the decisions' own syncs are what is measured.
	rs, err := redisstore.Open(ctx, srv.URL(), redisstore.WithMode(redisstore.Sync, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	fs := failsafe.New(rs, failsafe.WithTimeout(timeout), failsafe.WithBreaker(100, time.Minute), failsafe.WithPolicy(failsafe.Deny))
	defer fs.Close()
	limit := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
	take := func() (ratekeeper.Decision, time.Duration) {
		t.Helper()
		start := time.Now()
		d, err := fs.Take(ctx, ratekeeper.Request{Key: "k", Limit: limit, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d, time.Since(start)
	}
	if d, _ := take(); !d.Allowed || d.Fallback != ratekeeper.NoFallback {
		t.Fatalf("Redis up: %+v", d)
	}
	srv.Pause()
	defer srv.Resume()
	// The state is no longer fresh after two periods: the next decision
	// tries a sync and waits out the timeout (the loop's sync, due within
	// a period, may be the one it waits for).
	time.Sleep(500 * time.Millisecond) // the state ages: a duration under test, not a wait for a condition
	take()
	for i := range 5 {
		d, took := take()
		if took > bound || !d.Allowed || d.Fallback != ratekeeper.NoFallback {
			t.Fatalf("decision %d after an unanswered sync: %+v in %v, want allowed from what is known at once", i, d, took)
		}
	}
	srv.Resume()
}

// A slot acquire that runs out of the failsafe timeout while Redis is
// stopped (SIGSTOP) runs once Redis continues, after the policy has
// decided and the give-back the failsafe store sent at once has failed
// too: its slot is given back soon after Redis answers again (the Redis
// store cancels it), not held for the TTL with the key's only slot.
func TestSlotTimedOutOnStoppedRedisIsGivenBack(t *testing.T) {
	for _, policy := range []failsafe.Policy{failsafe.Deny, failsafe.Allow} {
		t.Run(string(policy), func(t *testing.T) {
			srv := redistest.Start(t)
			t.Cleanup(srv.Resume)
			ctx := context.Background()
			rs, err := redisstore.Open(ctx, srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			fs := failsafe.New(rs, failsafe.WithPolicy(policy), failsafe.WithLocalStore(memstore.New()), failsafe.WithTimeout(100*time.Millisecond), failsafe.WithBreaker(0, 0))
			defer fs.Close()
			lim, err := ratekeeper.NewConcurrencyLimiter(fs, ratekeeper.Concurrency{Max: 1, TTL: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := lim.TryAcquire(ctx, "k") // loads the script
			if err != nil || p == nil {
				t.Fatalf("Redis up: %v", err)
			}
			p.Release(ctx)
			srv.Pause()
			p, d, err := lim.TryAcquire(ctx, "k")
			if err != nil || d.Fallback == ratekeeper.NoFallback {
				t.Fatalf("Redis stopped: %+v %v, want the policy's answer", d, err)
			}
			p.Release(ctx) // Allow's slot: its give-back on Redis fails too
			srv.Resume()
			resumed := time.Now()
			for deadline := resumed.Add(5 * time.Second); ; {
				n, err := rs.InFlight(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v after Redis continued, the timed-out acquire holds the key's slot", time.Since(resumed))
				}
				time.Sleep(10 * time.Millisecond) // the polling interval
			}
			t.Logf("the slot was free %v after Redis continued", time.Since(resumed))
		})
	}
}
