package failsafe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// flaky is a primary that fails while down is set, and blocks until the
// context ends while hang is set.
type flaky struct {
	down, hang atomic.Bool
	calls      atomic.Int64
}

var errDown = errors.New("connection refused")

func (f *flaky) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	f.calls.Add(1)
	if f.hang.Load() {
		<-ctx.Done()
		return ratekeeper.Decision{}, ctx.Err()
	}
	if f.down.Load() {
		return ratekeeper.Decision{}, errDown
	}
	return ratekeeper.Decision{Allowed: true, Limit: req.Limit.Capacity(), Remaining: 7}, nil
}

func (f *flaky) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	_, err := f.Take(ctx, req)
	return err
}

// fakeNow is a manual clock for the breaker.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeNow) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var limit = ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 4, Period: time.Hour}

func req(key string) ratekeeper.Request {
	return ratekeeper.Request{Key: key, Limit: limit, N: 1}
}

func TestPolicies(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		policy  Policy
		allowed []bool
	}{
		{Allow, []bool{true, true, true, true}},
		{Deny, []bool{false, false, false, false}},
		{Local, []bool{true, true, false, false}}, // 4 per hour over 2 instances
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			p := &flaky{}
			p.down.Store(true)
			var fallbacks atomic.Int64
			s := New(p, WithPolicy(tt.policy), WithLocalStore(memstore.New()), WithInstances(2), WithBreaker(0, 0),
				WithFallbackHook(func(ratekeeper.Request, ratekeeper.Decision) { fallbacks.Add(1) }))
			defer s.Close()
			for i, want := range tt.allowed {
				d, err := s.Take(ctx, req("k"))
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != want {
					t.Fatalf("decision %d: allowed %v, want %v", i, d.Allowed, want)
				}
				if !d.Allowed && d.RetryAfter <= 0 {
					t.Fatalf("decision %d: refused without RetryAfter", i)
				}
			}
			st := s.Stats()
			if st.Errors != 4 || fallbacks.Load() != 4 || st.FallbackAllowed+st.FallbackDenied+st.FallbackLocal != 4 {
				t.Fatalf("stats %+v, fallback hook %d", st, fallbacks.Load())
			}
			p.down.Store(false)
			if d, _ := s.Take(ctx, req("k")); d.Remaining != 7 {
				t.Fatalf("primary back, got %+v", d)
			}
		})
	}
}

func TestBreaker(t *testing.T) {
	ctx := context.Background()
	clk := &fakeNow{t: time.Unix(1e9, 0)}
	p := &flaky{}
	var hooked atomic.Int64
	s := New(p, WithBreaker(3, time.Second), WithErrorHook(func(error) { hooked.Add(1) }), WithClock(clk))
	p.down.Store(true)
	for i := 0; i < 10; i++ {
		if d, err := s.Take(ctx, req("k")); err != nil || !d.Allowed {
			t.Fatalf("fail open: %+v %v", d, err)
		}
	}
	if got := p.calls.Load(); got != 3 {
		t.Fatalf("primary called %d times, want 3 (the breaker opens after 3 failures)", got)
	}
	st := s.Stats()
	if st.Breaker != Open || st.BreakerOpens != 1 || st.ShortCircuits != 7 || hooked.Load() != 3 {
		t.Fatalf("stats %+v, hook %d", st, hooked.Load())
	}
	clk.add(time.Second)
	s.Take(ctx, req("k")) // the probe fails: open again
	if p.calls.Load() != 4 || s.Stats().Breaker != Open {
		t.Fatalf("probe: calls %d, %+v", p.calls.Load(), s.Stats())
	}
	s.Take(ctx, req("k"))
	if p.calls.Load() != 4 {
		t.Fatal("called the primary during the cool-down")
	}
	p.down.Store(false)
	clk.add(time.Second)
	if d, _ := s.Take(ctx, req("k")); d.Remaining != 7 {
		t.Fatalf("the probe should reach the primary: %+v", d)
	}
	if st := s.Stats(); st.Breaker != Closed || st.BreakerOpens != 1 {
		t.Fatalf("after recovery: %+v", st)
	}
}

func TestTimeout(t *testing.T) {
	p := &flaky{}
	p.hang.Store(true)
	s := New(p, WithTimeout(20*time.Millisecond), WithPolicy(Deny))
	start := time.Now()
	d, err := s.Take(context.Background(), req("k"))
	if err != nil || d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("took %v with a 20ms timeout", el)
	}
	if st := s.Stats(); st.Timeouts != 1 || st.Errors != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestCallerCancelIsNotAStoreError(t *testing.T) {
	p := &flaky{}
	p.hang.Store(true)
	s := New(p, WithTimeout(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, req("k")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if st := s.Stats(); st.Errors != 0 || st.FallbackAllowed != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeNow{t: time.Unix(1e9, 0)}
	p := &flaky{}
	p.down.Store(true)
	s := New(p, WithBreaker(0, 0), WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), WithLogInterval(time.Minute), WithClock(clk))
	for i := 0; i < 100; i++ {
		s.Take(context.Background(), req("k"))
	}
	clk.add(time.Minute)
	s.Take(context.Background(), req("k"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "not_logged_since_last=99") {
		t.Fatalf("log:\n%s", buf.String())
	}
}

func TestRefundAfterLocalFallback(t *testing.T) {
	ctx := context.Background()
	p := &flaky{}
	p.down.Store(true)
	s := New(p, WithPolicy(Local), WithLocalStore(memstore.New()), WithBreaker(0, 0))
	defer s.Close()
	var last ratekeeper.Decision
	for i := 0; i < 4; i++ {
		last, _ = s.Take(ctx, req("k"))
	}
	if d, _ := s.Take(ctx, req("k")); d.Allowed {
		t.Fatal("local limit not applied")
	}
	if err := s.Refund(ctx, req("k"), last); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Take(ctx, req("k")); !d.Allowed {
		t.Fatal("the refund did not reach the local store")
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"allow", "deny", "local", "", "Allow", "fail-open"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			if p != "" {
				t.Fatalf("%q: error and policy %q", s, p)
			}
			return
		}
		if string(p) != s || (p != Allow && p != Deny && p != Local) {
			t.Fatalf("%q parsed as %q", s, p)
		}
	})
}

func TestTakeAll(t *testing.T) {
	ctx := context.Background()
	two := []ratekeeper.Request{req("a"), req("b")}
	for _, tt := range []struct {
		policy Policy
		want   []bool // all allowed, batch after batch, while the primary is down
	}{
		{Allow, []bool{true, true, true}},
		{Deny, []bool{false, false, false}},
		{Local, []bool{true, true, false}}, // 4 per hour over 2 instances
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			p := &flaky{}
			s := New(p, WithPolicy(tt.policy), WithLocalStore(memstore.New()), WithInstances(2), WithBreaker(0, 0))
			defer s.Close()
			out := make([]ratekeeper.Decision, 2)
			if all, err := s.TakeAll(ctx, two, out); err != nil || !all || out[0].Remaining != 7 {
				t.Fatalf("primary up: %v %v %+v", all, err, out)
			}
			p.down.Store(true)
			for i, want := range tt.want {
				all, err := s.TakeAll(ctx, two, out)
				if err != nil || all != want || out[0].Allowed != want || out[1].Allowed != want {
					t.Fatalf("batch %d: all %v (%+v), %v; want %v", i, all, out, err, want)
				}
			}
			if st := s.Stats(); st.FallbackAllowed+st.FallbackDenied+st.FallbackLocal != 6 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// onePart is what a test NetworkStore of one part adds to its primary:
// Part is "", and no call is reported answered.
type onePart struct{}

func (onePart) Part(ratekeeper.Request) string           { return "" }
func (onePart) OnAnswer(func(part string)) (stop func()) { return func() {} }

// takeBy bounds s.Take by a context with deadline: the TakeBy of a test
// NetworkStore with nothing cheaper.
func takeBy(ctx context.Context, s ratekeeper.Store, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return s.Take(ctx, req)
}

// byDeadline is a NetworkStore that, while hang is set, returns an error
// that is not context.DeadlineExceeded (as a socket deadline gives) once
// the deadline has passed; it records the deadlines it was given.
type byDeadline struct {
	flaky
	onePart
	deadlines []time.Time
}

var errIOTimeout = errors.New("i/o timeout")

func (b *byDeadline) TakeBy(ctx context.Context, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error) {
	b.deadlines = append(b.deadlines, deadline)
	if b.hang.Load() {
		select {
		case <-time.After(time.Until(deadline)):
			return ratekeeper.Decision{}, errIOTimeout
		case <-ctx.Done():
			return ratekeeper.Decision{}, ctx.Err()
		}
	}
	return b.flaky.Take(ctx, req)
}

func (b *byDeadline) ProbePart(context.Context, string) error { return nil }

// TestTakeBy: with a NetworkStore, Take passes it the deadline now +
// timeout, counts an error past it as a timeout, and a cancelled caller as
// none.
func TestTakeBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &byDeadline{}
		s := New(p, WithTimeout(20*time.Millisecond), WithPolicy(Deny))
		start := time.Now()
		if d, err := s.Take(context.Background(), req("k")); err != nil || !d.Allowed {
			t.Fatalf("up: %+v %v", d, err)
		}
		p.hang.Store(true)
		d, err := s.Take(context.Background(), req("k"))
		if err != nil || d.Allowed {
			t.Fatalf("hung: %+v %v; want denied by the policy", d, err)
		}
		if el := time.Since(start); el != 20*time.Millisecond {
			t.Errorf("took %v with a 20ms timeout", el)
		}
		if len(p.deadlines) != 2 || !p.deadlines[0].Equal(start.Add(20*time.Millisecond)) {
			t.Errorf("deadlines %v, want start + 20ms first", p.deadlines)
		}
		if st := s.Stats(); st.Timeouts != 1 || st.Errors != 1 || st.FallbackDenied != 1 {
			t.Errorf("%+v", st)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Take(ctx, req("k")); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: err = %v, want context.Canceled", err)
		}
		if st := s.Stats(); st.Errors != 1 {
			t.Errorf("a cancelled caller counted as a store error: %+v", st)
		}
	})
}

var _ NetworkStore = (*byDeadline)(nil)

// probed is a NetworkStore of one part: Take fails while down is set, and
// each probe blocks until the test sends its result on release or its
// context ends.
type probed struct {
	flaky
	onePart
	probes  atomic.Int64
	release chan error
}

func (p *probed) TakeBy(ctx context.Context, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error) {
	return takeBy(ctx, &p.flaky, req, deadline)
}

func (p *probed) ProbePart(ctx context.Context, _ string) error {
	p.probes.Add(1)
	select {
	case err := <-p.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ NetworkStore = (*probed)(nil)

// TestProbeInBackground: once the breaker is open, no call waits on the
// primary. The call that finds the cool-down over starts one probe in the
// background and decides by the policy at once, as every other call does;
// a probe that hangs ends at the timeout and keeps the breaker open; the
// first probe that succeeds closes it; Close waits for the probe in flight;
// and nothing is left running (synctest.Test fails on a goroutine left
// blocked).
func TestProbeInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &probed{release: make(chan error)}
		const timeout, cooldown = 50 * time.Millisecond, 250 * time.Millisecond
		s := New(p, WithTimeout(timeout), WithBreaker(3, cooldown), WithPolicy(Deny))
		p.down.Store(true)
		for range 3 {
			s.Take(ctx, req("k"))
		}
		if st := s.Stats(); st.Breaker != Open || p.calls.Load() != 3 {
			t.Fatalf("after 3 failures: %+v, %d calls", st, p.calls.Load())
		}
		// take decides one request and checks that it took no time, came
		// from the policy and did not reach the primary.
		take := func(when string) {
			t.Helper()
			calls := p.calls.Load()
			start := time.Now()
			d, err := s.Take(ctx, req("k"))
			if err != nil || d.Allowed || d.Fallback != ratekeeper.FallbackUncounted {
				t.Fatalf("%s: %+v %v, want refused by the deny policy", when, d, err)
			}
			if el := time.Since(start); el != 0 {
				t.Fatalf("%s: the call took %v", when, el)
			}
			if p.calls.Load() != calls {
				t.Fatalf("%s: the call reached the primary", when)
			}
		}

		time.Sleep(cooldown)
		take("the call that starts the probe")
		take("a call while the probe runs")
		synctest.Wait() // the probe is blocked in Probe
		if st := s.Stats(); p.probes.Load() != 1 || st.Breaker != HalfOpen {
			t.Fatalf("probes %d, %+v; want one probe, half-open", p.probes.Load(), st)
		}

		// The probe hangs: it ends at the timeout, and the breaker stays
		// open for another cool-down without a second probe.
		time.Sleep(timeout)
		synctest.Wait()
		if st := s.Stats(); st.Breaker != Open || st.ProbeFailures != 1 || st.ProbeSuccesses != 0 || st.Errors != 3 || st.Timeouts != 0 {
			t.Fatalf("after a hung probe: %+v", st)
		}
		time.Sleep(cooldown - time.Millisecond)
		take("during the second cool-down")
		if p.probes.Load() != 1 {
			t.Fatal("probed during the cool-down")
		}

		// The next probe fails at once.
		time.Sleep(time.Millisecond)
		take("the call that starts the second probe")
		p.release <- errDown
		synctest.Wait()
		if st := s.Stats(); st.Breaker != Open || st.ProbeFailures != 2 || p.probes.Load() != 2 {
			t.Fatalf("after a failed probe: %+v, %d probes", st, p.probes.Load())
		}

		// The primary is back: the next probe succeeds and closes the
		// breaker, and calls go to the primary again.
		p.down.Store(false)
		time.Sleep(cooldown)
		take("the call that starts the third probe")
		p.release <- nil
		synctest.Wait()
		if st := s.Stats(); st.Breaker != Closed || st.ProbeSuccesses != 1 || st.BreakerOpens != 1 || st.ShortCircuits != 5 {
			t.Fatalf("after a successful probe: %+v", st)
		}
		if d, err := s.Take(ctx, req("k")); err != nil || !d.Allowed || d.Fallback != ratekeeper.NoFallback || d.Remaining != 7 {
			t.Fatalf("breaker closed: %+v %v, want the primary's decision", d, err)
		}

		// Close waits for the probe in flight, and starts no other.
		p.down.Store(true)
		for range 3 {
			s.Take(ctx, req("k"))
		}
		time.Sleep(cooldown)
		take("the call that starts the fourth probe")
		var closed atomic.Bool
		go func() {
			s.Close()
			closed.Store(true)
		}()
		synctest.Wait()
		if closed.Load() {
			t.Fatal("Close returned while the probe ran")
		}
		p.release <- nil
		synctest.Wait()
		if !closed.Load() {
			t.Fatal("Close did not return after the probe")
		}
		p.down.Store(true)
		for range 3 {
			s.Take(ctx, req("k"))
		}
		time.Sleep(cooldown)
		take("a call after Close")
		if p.probes.Load() != 4 {
			t.Fatalf("%d probes, want no probe after Close", p.probes.Load())
		}
	})
}

// TestProbeByACall: a primary that is not a NetworkStore keeps the breaker's
// probe in band. After the cool-down one call goes to the primary (and
// waits for it, up to the timeout), while the calls that come meanwhile
// decide by the policy at once.
func TestProbeByACall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &flaky{}
		const timeout, cooldown = 50 * time.Millisecond, 250 * time.Millisecond
		s := New(p, WithTimeout(timeout), WithBreaker(3, cooldown))
		defer s.Close()
		p.hang.Store(true)
		for range 3 {
			s.Take(ctx, req("k"))
		}
		time.Sleep(cooldown)
		var probeTook time.Duration
		go func() {
			start := time.Now()
			s.Take(ctx, req("k"))
			probeTook = time.Since(start)
		}()
		synctest.Wait() // the probe call waits on the primary
		if st := s.Stats(); st.Breaker != HalfOpen || p.calls.Load() != 4 {
			t.Fatalf("%+v, %d calls", st, p.calls.Load())
		}
		start := time.Now()
		if d, err := s.Take(ctx, req("k")); err != nil || !d.Allowed || d.Fallback != ratekeeper.FallbackUncounted {
			t.Fatalf("%+v %v", d, err)
		}
		if el := time.Since(start); el != 0 || p.calls.Load() != 4 {
			t.Fatalf("a call during the probe took %v, calls %d", el, p.calls.Load())
		}
		time.Sleep(timeout)
		synctest.Wait()
		if st := s.Stats(); probeTook != timeout || st.Breaker != Open || st.ProbeFailures != 1 || st.Timeouts != 4 {
			t.Fatalf("the probe call took %v; %+v", probeTook, st)
		}
		p.hang.Store(false)
		time.Sleep(cooldown)
		if d, err := s.Take(ctx, req("k")); err != nil || d.Remaining != 7 || d.Fallback != ratekeeper.NoFallback {
			t.Fatalf("the probe call should reach the primary: %+v %v", d, err)
		}
		if st := s.Stats(); st.Breaker != Closed || st.ProbeSuccesses != 1 {
			t.Fatalf("%+v", st)
		}
	})
}

// TestFallbackMarks: each policy's decisions say how they were made, and
// the uncounted ones carry no invented figures.
func TestFallbackMarks(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		policy Policy
		want   ratekeeper.Fallback
	}{
		{Allow, ratekeeper.FallbackUncounted},
		{Deny, ratekeeper.FallbackUncounted},
		{Local, ratekeeper.FallbackLocal},
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			p := &flaky{}
			p.down.Store(true)
			s := New(p, WithPolicy(tt.policy), WithLocalStore(memstore.New()), WithBreaker(0, 0))
			defer s.Close()
			d, err := s.Take(ctx, req("k"))
			if err != nil || d.Fallback != tt.want || d.Limit != 4 {
				t.Fatalf("Take: %+v %v, want Fallback %v", d, err, tt.want)
			}
			if tt.want == ratekeeper.FallbackUncounted && (d.Remaining != 0 || d.ResetAfter != 0) {
				t.Fatalf("invented figures: %+v", d)
			}
			if tt.policy == Local && (d.Remaining != 3 || d.ResetAfter <= 0) {
				t.Fatalf("the local store's figures are lost: %+v", d)
			}
			out := make([]ratekeeper.Decision, 2)
			if _, err := s.TakeAll(ctx, []ratekeeper.Request{req("a"), req("b")}, out); err != nil {
				t.Fatal(err)
			}
			for i, d := range out {
				if d.Fallback != tt.want {
					t.Fatalf("TakeAll[%d]: %+v, want Fallback %v", i, d, tt.want)
				}
			}
			p.down.Store(false)
			if d, _ := s.Take(ctx, req("k")); d.Fallback != ratekeeper.NoFallback {
				t.Fatalf("the primary's decision: %+v", d)
			}
		})
	}
}

// partial is a primary of which one part is down (a Cluster with a dead
// primary): keys named "dead" fail, others succeed, those named "slow"
// after release is closed.
type partial struct{ release chan struct{} }

func (p *partial) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	switch req.Key {
	case "dead":
		return ratekeeper.Decision{}, errDown
	case "slow":
		<-p.release
	}
	return ratekeeper.Decision{Allowed: true, Limit: req.Limit.Capacity(), Remaining: 7}, nil
}

func (p *partial) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error { return nil }

// A call that began before the breaker opened and succeeds after it does
// not close it: only the probe does. During a Cluster's partial outage such
// successes (other keys, on nodes that are up) closed the breaker at once,
// it opened again on the dead node's keys, and each time the local
// fallback's refilled buckets admitted beside Redis.
func TestOnlyTheProbeCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := &partial{release: make(chan struct{})}
		s := New(p, WithTimeout(0), WithBreaker(3, 250*time.Millisecond))
		defer s.Close()
		done := make(chan ratekeeper.Decision)
		go func() {
			d, _ := s.Take(ctx, req("slow"))
			done <- d
		}()
		synctest.Wait() // in flight, before the breaker opens
		for range 3 {
			s.Take(ctx, req("dead"))
		}
		if st := s.Stats(); st.Breaker != Open {
			t.Fatalf("after 3 failures: %+v", st)
		}
		close(p.release)
		if d := <-done; d.Fallback != ratekeeper.NoFallback {
			t.Fatalf("the slow call: %+v", d)
		}
		if st := s.Stats(); st.Breaker != Open {
			t.Fatalf("a call that began before the breaker opened closed it: %+v", st)
		}
		if d, _ := s.Take(ctx, req("other")); d.Fallback == ratekeeper.NoFallback {
			t.Fatal("a call reached the primary while the breaker was open")
		}
		// After the cool-down the probe (in band: no NetworkStore) closes it.
		time.Sleep(250 * time.Millisecond)
		if d, _ := s.Take(ctx, req("other")); d.Fallback != ratekeeper.NoFallback {
			t.Fatalf("the probe: %+v", d)
		}
		if st := s.Stats(); st.Breaker != Closed {
			t.Fatalf("after a successful probe: %+v", st)
		}
	})
}

// parted is a NetworkStore of two parts, a and b: a key's part is
// its first letter; keys of a part in down fail; ProbePart answers from
// down, and says gone parts are fine.
type parted struct {
	mu     sync.Mutex
	down   map[string]bool
	calls  map[string]int
	probes map[string]int
}

func newParted() *parted {
	return &parted{down: map[string]bool{}, calls: map[string]int{}, probes: map[string]int{}}
}

func (p *parted) Part(req ratekeeper.Request) string { return req.Key[:1] }

func (p *parted) setDown(part string, down bool) {
	p.mu.Lock()
	p.down[part] = down
	p.mu.Unlock()
}

func (p *parted) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[req.Key[:1]]++
	if p.down[req.Key[:1]] {
		return ratekeeper.Decision{}, errDown
	}
	return ratekeeper.Decision{Allowed: true, Limit: req.Limit.Capacity(), Remaining: 7}, nil
}

func (p *parted) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error { return nil }

func (p *parted) TakeBy(ctx context.Context, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error) {
	return takeBy(ctx, p, req, deadline)
}

func (p *parted) OnAnswer(func(part string)) (stop func()) { return func() {} }

func (p *parted) ProbePart(ctx context.Context, part string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes[part]++
	if p.down[part] {
		return errDown
	}
	return nil
}

func (p *parted) count(m map[string]int, part string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return m[part]
}

var _ NetworkStore = (*parted)(nil)

// TestPartsFailApart: with a NetworkStore of parts (a Redis Cluster), one
// dead part opens its own breaker though the other part's calls succeed
// in between (with one breaker for the store they reset its count, and
// every call on the dead part waited out the timeout); its keys then go to
// the policy at once while the other part's keep the primary's decisions;
// a batch that touches the open part goes to the policy whole; and the
// part's probe closes its breaker and forgets it.
func TestPartsFailApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		p := newParted()
		const cooldown = 250 * time.Millisecond
		s := New(p, WithTimeout(50*time.Millisecond), WithBreaker(3, cooldown), WithPolicy(Deny))
		defer s.Close()
		p.setDown("a", true)
		for range 3 {
			s.Take(ctx, req("a1"))
			if d, _ := s.Take(ctx, req("b1")); d.Fallback != ratekeeper.NoFallback {
				t.Fatalf("a call on the live part fell back: %+v", d)
			}
		}
		if st := s.Stats(); st.Breaker != Open || st.BreakerOpens != 1 {
			t.Fatalf("after 3 failures of part a between successes of b: %+v", st)
		}
		for range 10 {
			if d, _ := s.Take(ctx, req("a2")); d.Fallback != ratekeeper.FallbackUncounted {
				t.Fatalf("a call on the open part: %+v", d)
			}
			if d, _ := s.Take(ctx, req("b2")); d.Fallback != ratekeeper.NoFallback {
				t.Fatalf("a call on the live part: %+v", d)
			}
		}
		if n := p.count(p.calls, "a"); n != 3 {
			t.Fatalf("part a was called %d times, want the 3 that opened its breaker", n)
		}
		out := make([]ratekeeper.Decision, 2)
		if _, err := s.TakeAll(ctx, []ratekeeper.Request{req("b3"), req("a3")}, out); err != nil || out[0].Fallback != ratekeeper.FallbackUncounted {
			t.Fatalf("a batch on both parts while a is open: %+v %v", out, err)
		}
		if n := p.count(p.calls, "b"); n != 13 {
			t.Fatalf("part b was called %d times, want 13 (no batch)", n)
		}

		// After the cool-down a call on a starts a's probe, in the
		// background; a failed probe keeps it open.
		time.Sleep(cooldown)
		s.Take(ctx, req("a4"))
		synctest.Wait()
		if st := s.Stats(); st.Breaker != Open || p.count(p.probes, "a") != 1 || p.count(p.probes, "") != 0 {
			t.Fatalf("after a's failed probe: %+v, probes %v", st, p.probes)
		}
		// a is back (or gone): the next probe closes and forgets it.
		p.setDown("a", false)
		time.Sleep(cooldown)
		s.Take(ctx, req("a5"))
		synctest.Wait()
		if st := s.Stats(); st.Breaker != Closed || st.ProbeSuccesses != 1 {
			t.Fatalf("after a's probe succeeded: %+v", st)
		}
		if d, _ := s.Take(ctx, req("a6")); d.Fallback != ratekeeper.NoFallback {
			t.Fatalf("part a after its breaker closed: %+v", d)
		}
		n := 0
		s.parts.Range(func(any, any) bool { n++; return true })
		if n != 2 {
			t.Fatalf("%d parts' breakers kept, want the 2 in use", n)
		}
	})
}

// answering is parted reporting its answers: its decisions on keys starting with
// "l" are made without a call (as the Redis store's denial cache and
// leases are), and it reports an answer only for a call its part made.
type answering struct {
	*parted
	report func(part string)
}

func (a *answering) OnAnswer(f func(part string)) (stop func()) {
	a.report = f
	return func() { a.report = nil }
}

func (a *answering) TakeBy(ctx context.Context, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error) {
	return takeBy(ctx, a, req, deadline)
}

func (a *answering) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	if req.Key[1] == 'l' {
		return ratekeeper.Decision{Limit: req.Limit.Capacity(), RetryAfter: time.Second}, nil // a local refusal
	}
	d, err := a.parted.Take(ctx, req)
	if err == nil {
		a.report(req.Key[:1])
	}
	return d, err
}

var _ NetworkStore = (*answering)(nil)

// TestAnswersNotDecisionsResetTheCount: for a NetworkStore, a decision made
// without a call resets no part's count of failures (the part may be dead:
// with it, a dead part's breaker never opened while such decisions came
// between its failures), an answered call resets its own part's count and
// no other's, and an answer in the background (a sync) counts as one.
func TestAnswersNotDecisionsResetTheCount(t *testing.T) {
	ctx := context.Background()
	a := &answering{parted: newParted()}
	s := New(a, WithBreaker(3, time.Hour), WithPolicy(Deny))
	defer s.Close()
	if a.report == nil {
		t.Fatal("New did not ask the NetworkStore for its answers")
	}
	a.setDown("a", true)
	// a's failures, with local decisions on a and answered calls on b in
	// between: a opens after 3.
	for range 3 {
		if d, _ := s.Take(ctx, req("al")); d.Fallback != ratekeeper.NoFallback {
			t.Fatalf("a local decision on a before its breaker opened: %+v", d)
		}
		s.Take(ctx, req("ar")) // remote, fails
		if d, _ := s.Take(ctx, req("br")); d.Fallback != ratekeeper.NoFallback {
			t.Fatalf("part b: %+v", d)
		}
	}
	if st := s.Stats(); st.BreakerOpens != 1 {
		t.Fatalf("part a's breaker after 3 failures between local decisions: %+v", st)
	}
	// b: two failures, an answer in the background, two more: still
	// closed; a third opens it.
	a.setDown("b", true)
	s.Take(ctx, req("br"))
	s.Take(ctx, req("br"))
	a.report("b")
	s.Take(ctx, req("br"))
	s.Take(ctx, req("br"))
	if st := s.Stats(); st.BreakerOpens != 1 {
		t.Fatalf("part b opened though an answer came between its failures: %+v", st)
	}
	a.report("a") // another part's answer
	a.report("")  // or the store's
	s.Take(ctx, req("br"))
	if st := s.Stats(); st.BreakerOpens != 2 {
		t.Fatalf("part b after 3 failures since its last answer: %+v", st)
	}
	// An answer does not close an open breaker: only its probe does.
	a.setDown("a", false)
	a.report("a")
	if d, _ := s.Take(ctx, req("ar")); d.Fallback != ratekeeper.FallbackUncounted {
		t.Fatalf("part a's key after an answer, its breaker open: %+v", d)
	}
}

// TestLocalWithoutStore: the Local policy without WithLocalStore stops New
// at once, rather than failing every decision once the primary fails.
func TestLocalWithoutStore(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "WithLocalStore") {
			t.Fatalf("New with Local and no local store: recovered %v, want a panic naming WithLocalStore", r)
		}
	}()
	New(&flaky{}, WithPolicy(Local))
}
