package failsafe

import (
	"context"
	"errors"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// TestConformance runs the suite through a failsafe store over a memory
// store, Peek and Reset included.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ratekeeper.Store {
		m := memstore.New()
		s := New(m, WithPolicy(Local), WithLocalStore(memstore.New()), WithTimeout(0))
		t.Cleanup(func() { s.Close(); m.Close() })
		return s
	})
}

// A reset reaches the Local policy's store as well as the primary: a key
// the fallback refused is admitted by it again.
func TestResetLocalFallback(t *testing.T) {
	ctx := context.Background()
	m := memstore.New()
	defer m.Close()
	p := &resettable{Store: m}
	s := New(p, WithPolicy(Local), WithLocalStore(memstore.New()), WithBreaker(0, 0))
	defer s.Close()
	lim, err := ratekeeper.New(s, limit)
	if err != nil {
		t.Fatal(err)
	}
	p.down = true
	for i := 0; i < limit.Rate; i++ {
		lim.Allow(ctx, "k")
	}
	if d, _ := lim.Allow(ctx, "k"); d.Allowed || d.Fallback != ratekeeper.FallbackLocal {
		t.Fatalf("fallback after the limit: %+v", d)
	}
	if d, _ := lim.Peek(ctx, "k"); d.Allowed || d.RetryAfter <= 0 || d.Fallback != ratekeeper.FallbackLocal {
		t.Fatalf("peek on the fallback: %+v", d)
	}
	p.down = false
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if p.resets != 1 {
		t.Fatalf("primary reset %d times", p.resets)
	}
	p.down = true
	if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
		t.Fatalf("fallback after reset: %+v", d)
	}
}

// A primary that cannot reset makes Reset fail with ErrNoReset.
func TestResetUnsupported(t *testing.T) {
	s := New(&flaky{})
	defer s.Close()
	lim, _ := ratekeeper.New(s, limit)
	if err := lim.Reset(context.Background(), "k"); !errors.Is(err, ratekeeper.ErrNoReset) {
		t.Fatalf("err = %v, want ErrNoReset", err)
	}
	if err := mustLimiter(t, &flaky{}).Reset(context.Background(), "k"); !errors.Is(err, ratekeeper.ErrNoReset) {
		t.Fatalf("err = %v, want ErrNoReset", err)
	}
}

func mustLimiter(t *testing.T, s ratekeeper.Store) *ratekeeper.Limiter {
	l, err := ratekeeper.New(s, limit)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// resettable is a memory store that fails its decisions while down.
type resettable struct {
	*memstore.Store
	down   bool
	resets int
}

func (r *resettable) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	if r.down {
		return ratekeeper.Decision{}, errDown
	}
	return r.Store.Take(ctx, req)
}

func (r *resettable) Reset(ctx context.Context, key string, l ratekeeper.Limit) error {
	r.resets++
	return r.Store.Reset(ctx, key, l)
}
