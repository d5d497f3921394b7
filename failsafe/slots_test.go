package failsafe

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// slotFlaky is a memory store whose slot calls fail while down is set.
type slotFlaky struct {
	*memstore.Store
	down atomic.Bool
}

func (f *slotFlaky) AcquireSlot(ctx context.Context, req ratekeeper.SlotRequest) (ratekeeper.Decision, error) {
	if f.down.Load() {
		return ratekeeper.Decision{}, errDown
	}
	return f.Store.AcquireSlot(ctx, req)
}

func (f *slotFlaky) RefreshSlot(ctx context.Context, req ratekeeper.SlotRequest, d ratekeeper.Decision) (bool, error) {
	if f.down.Load() {
		return false, errDown
	}
	return f.Store.RefreshSlot(ctx, req, d)
}

func (f *slotFlaky) ReleaseSlot(ctx context.Context, req ratekeeper.SlotRequest, d ratekeeper.Decision) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.ReleaseSlot(ctx, req, d)
}

func newSlotFlaky(t *testing.T) *slotFlaky {
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	return &slotFlaky{Store: m}
}

// With its primary up, the failsafe store answers as the primary does.
func TestSlotsConformance(t *testing.T) {
	storetest.RunConcurrency(t, func(t *testing.T) ratekeeper.Store {
		s := New(newSlotFlaky(t))
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestSlotsNeedASlotPrimary(t *testing.T) {
	s := New(&flaky{})
	defer s.Close()
	l, err := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.TryAcquire(context.Background(), "k"); !errors.Is(err, ratekeeper.ErrNoSlots) {
		t.Fatalf("err = %v, want ErrNoSlots", err)
	}
}

// With the primary down, the policy decides: allow grants uncounted slots,
// deny refuses, local holds Max/instances slots in memory and frees them
// on release. Releases and refreshes of those slots never reach the
// primary.
func TestSlotPolicies(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		policy  Policy
		allowed []bool
		fb      ratekeeper.Fallback
	}{
		{Allow, []bool{true, true, true}, ratekeeper.FallbackUncounted},
		{Deny, []bool{false, false, false}, ratekeeper.FallbackUncounted},
		{Local, []bool{true, true, false}, ratekeeper.FallbackLocal}, // 4 over 2 instances
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			p := newSlotFlaky(t)
			p.down.Store(true)
			s := New(p, WithPolicy(tt.policy), WithLocalStore(memstore.New()), WithInstances(2), WithBreaker(0, 0))
			defer s.Close()
			l, _ := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: 4, RetryAfter: 5 * time.Second})
			var held []*ratekeeper.Permit
			for i, want := range tt.allowed {
				pm, d, err := l.TryAcquire(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				wantLimit := 4
				if tt.policy == Local {
					wantLimit = 2 // its figures are the instance's share's
				}
				if d.Allowed != want || d.Fallback != tt.fb || d.Limit != wantLimit {
					t.Fatalf("acquire %d: %+v, want allowed %v fallback %v", i, d, want, tt.fb)
				}
				if !d.Allowed && d.RetryAfter != map[Policy]time.Duration{Deny: DenyRetryAfter, Local: 5 * time.Second}[tt.policy] {
					t.Fatalf("acquire %d: RetryAfter %v", i, d.RetryAfter)
				}
				if pm != nil {
					held = append(held, pm)
				}
			}
			p.down.Store(false) // the primary is back: the fallback's slots still go where they came from
			for _, pm := range held {
				if err := pm.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if tt.policy == Local {
				if d, err := s.local.AcquireSlot(ctx, ratekeeper.SlotRequest{Key: "k", ID: "x", Max: 2, TTL: time.Second}); err != nil || d.Remaining != 1 {
					t.Fatalf("the local slots were not freed: %+v %v", d, err)
				}
			}
			if n := p.InFlight("k", time.Time{}); n != 0 {
				t.Fatalf("the primary holds %d slots", n)
			}
			if pm, d, _ := l.TryAcquire(ctx, "k"); pm == nil || d.Fallback != ratekeeper.NoFallback {
				t.Fatalf("primary back: %+v", d)
			} else {
				pm.Release(ctx)
			}
		})
	}
}

// A release that cannot reach the primary is not an error (it is counted
// and logged): the slot's lease expires by itself.
func TestSlotReleaseWhileDown(t *testing.T) {
	ctx := context.Background()
	p := newSlotFlaky(t)
	var errs atomic.Int64
	s := New(p, WithBreaker(0, 0), WithErrorHook(func(error) { errs.Add(1) }))
	defer s.Close()
	l, _ := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: 1, TTL: time.Second})
	pm, _, _ := l.TryAcquire(ctx, "k")
	p.down.Store(true)
	if err := pm.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if errs.Load() != 1 {
		t.Fatalf("%d errors seen, want 1", errs.Load())
	}
	if n := p.InFlight("k", time.Time{}); n != 1 {
		t.Fatalf("in flight %d; the unreleased lease should be there until its TTL", n)
	}
	if n := p.InFlight("k", time.Now().Add(time.Second)); n != 0 {
		t.Fatalf("in flight %d a TTL later", n)
	}
}

// slotLate is a memory store whose AcquireSlot answers too late: the slot
// is taken, then the call waits out its context, as a Redis script does
// that ran but whose reply came after the failsafe timeout.
type slotLate struct{ *memstore.Store }

func (s slotLate) AcquireSlot(ctx context.Context, req ratekeeper.SlotRequest) (ratekeeper.Decision, error) {
	if _, err := s.Store.AcquireSlot(ctx, req); err != nil {
		return ratekeeper.Decision{}, err
	}
	<-ctx.Done()
	return ratekeeper.Decision{}, ctx.Err()
}

// A slot the primary took after the timeout gave the request to the
// policy is given back on the primary when the request ends: otherwise
// every acquire that times out while Redis is slow leaves a lease that
// nothing releases or refreshes, and the key's clients are refused for a
// whole TTL once Redis has recovered.
func TestSlotTakenLateIsReleased(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []Policy{Allow, Local} {
		t.Run(string(policy), func(t *testing.T) {
			m := memstore.New()
			defer m.Close()
			s := New(slotLate{m}, WithPolicy(policy), WithLocalStore(memstore.New()), WithTimeout(5*time.Millisecond), WithBreaker(0, 0))
			defer s.Close()
			l, _ := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: 1, TTL: time.Minute})
			p, d, err := l.TryAcquire(ctx, "k")
			if err != nil || !d.Allowed || d.Fallback == ratekeeper.NoFallback {
				t.Fatalf("%+v %v: want a fallback's slot", d, err)
			}
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := m.InFlight("k", time.Time{}); n != 0 {
				t.Fatalf("the primary holds %d slots of k after the release, until its lease ends", n)
			}
		})
	}
}

// A refusal by the policy (deny, or local's share used up) leaves nothing
// behind on the primary either, nor in the store's memory.
func TestSlotTakenLateRefusedIsReleased(t *testing.T) {
	ctx := context.Background()
	m := memstore.New()
	defer m.Close()
	s := New(slotLate{m}, WithPolicy(Deny), WithTimeout(5*time.Millisecond), WithBreaker(0, 0))
	defer s.Close()
	l, _ := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: 1, TTL: time.Minute})
	if p, d, err := l.TryAcquire(ctx, "k"); err != nil || d.Allowed || p != nil {
		t.Fatalf("%+v %v: want deny's refusal", d, err)
	}
	if n := m.InFlight("k", time.Time{}); n != 0 {
		t.Fatalf("the primary holds %d slots of k after a refusal", n)
	}
	s.late.Range(func(k, _ any) bool { t.Errorf("%v is remembered", k); return true })
}
