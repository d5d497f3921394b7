package shared

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// halfDown is a remote whose items on one key fail alone while the call
// succeeds, as on a Cluster whose primary for that key does not answer.
type halfDown struct {
	*Model
	down *string
}

var errPrimaryDown = errors.New("primary down")

func (h halfDown) Add(ctx context.Context, items []Item) error {
	var up []Item
	for _, it := range items {
		if it.Key != *h.down {
			up = append(up, it)
		}
	}
	if err := h.Model.Add(ctx, up); err != nil {
		return err
	}
	k := 0
	for i := range items {
		if items[i].Key == *h.down {
			items[i].Err = errPrimaryDown
			continue
		}
		items[i] = up[k]
		k++
	}
	return nil
}

// A sync whose items fail alone keeps the failed keys' counts for the next
// sync and applies the others once; it reads the remote's clock from an
// item that was answered (the failed ones carry none: reading one set the
// clock estimate to the epoch).
func TestSyncItemsFailAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := NewModel()
		m.Latency = 2 * time.Millisecond
		// "a" sorts first whatever the order: both keys fail in turn.
		for _, down := range []string{"a", "b"} {
			failing := ""
			s := New(halfDown{m, &failing}, Sync, 100*time.Millisecond, WithoutLoop())
			l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
			take := func(k string) {
				t.Helper()
				if d, err := s.Take(ctx, ratekeeper.Request{Key: down + k, Limit: l, N: 1}); err != nil || !d.Allowed {
					t.Fatalf("take %s: %+v %v", k, d, err)
				}
			}
			take("a") // both keys' states loaded while all is up
			take("b")
			s.Flush()
			failing = down + down
			for range 3 {
				take("a")
				take("b")
				time.Sleep(100 * time.Millisecond)
				s.Flush()
				if off := time.Duration(s.offset.Load()) * time.Microsecond; off < -time.Second || off > time.Second {
					t.Fatalf("down %s: clock offset %v after a sync whose item failed", down, off)
				}
			}
			up := "a"
			if down == "a" {
				up = "b"
			}
			if got := m.State(down+up, l).Window.Count; got != 4 {
				t.Errorf("down %s: the answered key counts %d, want 4 (each sent once)", down, got)
			}
			if got := m.State(down+down, l).Window.Count; got != 1 {
				t.Errorf("down %s: the failed key counts %d in the remote, want 1 (from before)", down, got)
			}
			// Back: the failed key's counts all arrive.
			failing = ""
			s.Flush()
			if got := m.State(down+down, l).Window.Count; got != 4 {
				t.Errorf("down %s: the failed key counts %d once back, want 4 (nothing lost)", down, got)
			}
			s.Close()
		}
	})
}

// slowPart is a remote whose part "a" (keys that begin with a)
// answers a sync only after a second, as a dead Cluster primary does by
// the loop's timeout.
type slowPart struct{ *Model }

func (slowPart) Part(req ratekeeper.Request) string { return req.Key[:1] }

func (p slowPart) Add(ctx context.Context, items []Item) error {
	for _, it := range items {
		if it.Key[0] == 'a' {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
			break
		}
	}
	return p.Model.Add(ctx, items)
}

// The loop syncs each part of a remote WithParts in a call of its own: the
// live part's keys are synced, and free, while the slow part's call is
// still out. In one call, they waited out the slow part with it.
func TestSyncByPart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := NewModel()
		s := New(slowPart{m}, Sync, 100*time.Millisecond, WithoutLoop(), WithParts(slowPart{}.Part))
		defer s.Close()
		l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
		// Each key is loaded on its own, twice counted locally: the counts
		// wait for a sync.
		for _, k := range []string{"a1", "b1", "b2", "a1", "b1", "b2"} {
			if _, err := s.Take(ctx, ratekeeper.Request{Key: k, Limit: l, N: 1}); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		go func() { s.Flush(); close(done) }()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		for _, k := range []string{"b1", "b2"} {
			if got := m.State(k, l).Window.Count; got != 2 {
				t.Errorf("%s: the live part's key counts %d 10ms into the sync, want 2", k, got)
			}
		}
		if got := m.State("a1", l).Window.Count; got != 0 {
			t.Errorf("a1: the slow part's key counts %d before its answer, want 0", got)
		}
		<-done
		if got := m.State("a1", l).Window.Count; got != 2 {
			t.Errorf("a1: %d once answered, want 2", got)
		}
	})
}

// hungGiveBack is a remote whose give-backs (adds of a negative count)
// hang until their context ends, as on a server that stopped answering
// for the keys given back.
type hungGiveBack struct{ *Model }

func (h hungGiveBack) Add(ctx context.Context, items []Item) error {
	for _, it := range items {
		if it.N < 0 {
			<-ctx.Done()
			return ctx.Err()
		}
	}
	return h.Model.Add(ctx, items)
}

// The loop does not wait for a give-back: in a store that mixes modes, a
// give-back that hangs held the loop for its timeout (a second), and the
// sync-mode keys' counts waited with it.
func TestGiveBackHoldsNoSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := NewModel()
		const period = 50 * time.Millisecond
		leased := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
		synced := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 999, Period: time.Hour}
		s := New(hungGiveBack{m}, Lease, period)
		defer s.Close()
		s.SetLimitModes(map[ratekeeper.Limit]Mode{synced: Sync})
		// Busy for a while, so that the quota leased runs ahead of use.
		for range 20 {
			if _, err := s.Take(ctx, ratekeeper.Request{Key: "leased", Limit: leased, N: 1}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		// Idle for a period: what is left is given back, and hangs.
		time.Sleep(3 * period)
		synctest.Wait()
		if s.Stats().GiveBacks == 0 {
			t.Fatalf("no give-back: the test tests nothing: %+v", s.Stats())
		}
		for i := range 5 {
			if _, err := s.Take(ctx, ratekeeper.Request{Key: "synced", Limit: synced, N: 1}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * period)
			synctest.Wait()
			if got := m.State("synced", synced).Window.Count; got != int64(i+1) {
				t.Fatalf("after %d takes and two periods, the synced key counts %d in the remote: the loop waited on the give-back", i+1, got)
			}
		}
	})
}

// hanging is a remote whose calls, while hang is set, end only with their
// context, as on a server that does not answer.
type hanging struct {
	*Model
	hang *atomic.Bool
}

func (h hanging) Add(ctx context.Context, items []Item) error {
	if h.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Model.Add(ctx, items)
}

// Once a key's sync has failed, its decisions in sync mode use what the
// instance knows at once, while that is within the stale bound: each
// waited out a sync of its own first and then decided so anyway, so that
// while a server did not answer every request took the store timeout (the
// fault harness, cluster-kill-primary-full-coverage in sync mode: p99 of
// the timeout). Past the bound a decision tries the remote again and fails;
// once a sync is answered, decisions are the fresh state's again.
func TestNoWaitAfterAnUnansweredSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			period  = 100 * time.Millisecond
			timeout = 50 * time.Millisecond // the failsafe store's
		)
		var hang atomic.Bool
		m := NewModel()
		s := New(hanging{m, &hang}, Sync, period, WithoutLoop())
		defer s.Close()
		l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
		take := func() (time.Duration, error) {
			t.Helper()
			// The failsafe store's timeout, as the Redis store bounds it.
			ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, ErrTimeout)
			defer cancel()
			start := time.Now()
			_, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1})
			return time.Since(start), err
		}
		if took, err := take(); err != nil || took != 0 {
			t.Fatalf("the first decision: %v, took %v", err, took)
		}
		hang.Store(true)
		time.Sleep(3 * period) // no longer fresh
		if took, err := take(); err != nil || took != timeout {
			t.Fatalf("the decision whose sync is not answered: %v, took %v, want the timeout and a local decision", err, took)
		}
		for i := range 5 {
			if took, err := take(); err != nil || took != 0 {
				t.Fatalf("decision %d after the unanswered sync: %v, took %v, want at once", i, err, took)
			}
		}
		time.Sleep(s.stale) // past the bound
		if took, err := take(); !errors.Is(err, errStale) || took != timeout {
			t.Fatalf("past the stale bound: %v, took %v, want errStale after trying the remote", err, took)
		}
		hang.Store(false)
		if took, err := take(); err != nil || took != 0 {
			t.Fatalf("the remote answering again: %v, took %v", err, took)
		}
		if took, err := take(); err != nil || took != 0 {
			t.Fatalf("after an answered sync: %v, took %v", err, took)
		}
	})
}

// cutAt is a remote whose items admitted at or after *cut fail alone while
// the others are applied, as when a key's items are split between two
// batches of which one times out.
type cutAt struct {
	*Model
	cut *int64
}

func (c cutAt) Add(ctx context.Context, items []Item) error {
	var keep []Item
	var idx []int
	for i, it := range items {
		if it.N != 0 && it.At >= *c.cut {
			items[i].Err = errPrimaryDown
			continue
		}
		keep = append(keep, it)
		idx = append(idx, i)
	}
	if err := c.Model.Add(ctx, keep); err != nil {
		return err
	}
	for k, i := range idx {
		items[i] = keep[k]
	}
	return nil
}

// A sync in which some of one key's items were applied and others failed
// sends again only those that failed: it sent them all again, and the
// remote counted the applied ones twice (here the sliding window's previous
// window, which still weighs in the current one).
func TestSyncSendsAgainOnlyWhatFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := NewModel()
		none := int64(math.MaxInt64)
		cut := none
		// A period of a second: every decision here is fresh, and only
		// Flush syncs.
		s := New(cutAt{m, &cut}, Sync, time.Second, WithoutLoop())
		defer s.Close()
		l := ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 1000, Period: time.Second}
		take := func() {
			t.Helper()
			if d, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1}); err != nil || !d.Allowed {
				t.Fatalf("take: %+v %v", d, err)
			}
		}
		take()
		take()
		p := algo.Params("k", l)
		end := algo.WindowEnd(&p, time.Now().UnixMicro())
		time.Sleep(time.Until(time.UnixMicro(end)) + 100*time.Millisecond)
		take() // the next window: a second item for the key
		cut = end
		s.Flush() // the first window's item applied, the second's failed
		if got := m.State("k", l).Sliding; got.Prev != 2 || got.Cur != 0 {
			t.Fatalf("after the partial sync the remote holds %+v, want the previous window's 2 alone", got)
		}
		cut = none
		s.Flush()
		if got := m.State("k", l).Sliding; got.Prev != 2 || got.Cur != 1 {
			t.Fatalf("after the next sync the remote holds %+v, want 2 and 1: each count once", got)
		}
	})
}

// A decision whose caller gave up while its sync was in flight (its
// context cancelled: a client that hung up; or its own deadline, shorter
// than a round trip, before the store's bound) says nothing of the remote,
// which answers: the key's next decisions must not take it for an
// unanswered sync and decide from a state older than two periods (the
// bound of docs/redis.md, "How far sync mode goes over", holds while the
// remote answers). Here the other instance filled the limit meanwhile: a
// decision from the old state admitted past it.
func TestCancelledSyncIsNotUnanswered(t *testing.T) {
	for _, c := range []struct {
		name string
		ends func(ctx context.Context, latency time.Duration) (context.Context, context.CancelFunc)
	}{
		{"cancelled", func(ctx context.Context, latency time.Duration) (context.Context, context.CancelFunc) {
			gone, cancel := context.WithCancel(ctx)
			time.AfterFunc(latency/4, cancel) // the caller hangs up mid-sync
			return gone, cancel
		}},
		{"caller's deadline", func(ctx context.Context, latency time.Duration) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, latency/4)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const period = 100 * time.Millisecond
				m := NewModel()
				m.Latency = 2 * time.Millisecond
				a := New(m, Sync, period, WithoutLoop())
				defer a.Close()
				b := New(m, Sync, period, WithoutLoop())
				defer b.Close()
				l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 100, Period: time.Hour}
				req := ratekeeper.Request{Key: "k", Limit: l, N: 1}
				ctx := context.Background()
				if d, err := a.Take(ctx, req); err != nil || !d.Allowed {
					t.Fatalf("a's first decision: %+v %v", d, err)
				}
				a.Flush()
				for i := range 99 {
					if d, err := b.Take(ctx, req); err != nil || !d.Allowed {
						t.Fatalf("b's decision %d: %+v %v", i, d, err)
					}
				}
				b.Flush()
				if n := m.State("k", l).Window.Count; n != 100 {
					t.Fatalf("the remote counts %d, want the limit, 100", n)
				}
				// a's state is no longer fresh; what a admits next stays
				// under an eighth of the limit, which would sync at once.
				time.Sleep(3 * period)
				gone, cancel := c.ends(ctx, m.Latency)
				defer cancel()
				// Its sync fails: it is decided from what a knew, or not
				// at all.
				a.Take(gone, req)
				if gone.Err() == nil {
					t.Fatal("the caller did not give up during its sync")
				}
				if d, err := a.Take(ctx, req); err != nil || d.Allowed {
					t.Fatalf("the next decision, the remote answering: %+v %v, want refused (the limit is full)", d, err)
				}
			})
		})
	}
}

// A decision that waited out the store's time on a sync in flight (the
// loop's, which runs for up to a second against a server that does not
// answer) spares the next decisions the same wait: they decide at once
// from what is known, within the stale bound. A caller's own deadline
// spares nothing (it says nothing of the remote).
func TestNoWaitBehindAnUnansweredSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			period  = 100 * time.Millisecond
			timeout = 50 * time.Millisecond
		)
		var hang atomic.Bool
		s := New(hanging{NewModel(), &hang}, Sync, period, WithoutLoop())
		defer s.Close()
		l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
		take := func(cause error) (time.Duration, error) {
			t.Helper()
			ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, cause)
			defer cancel()
			start := time.Now()
			_, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1})
			return time.Since(start), err
		}
		if _, err := take(ErrTimeout); err != nil {
			t.Fatal(err)
		}
		hang.Store(true)
		time.Sleep(3 * period)
		flushed := make(chan struct{})
		go func() { s.Flush(); close(flushed) }() // the loop's sync, hung for a second
		synctest.Wait()
		if took, err := take(context.DeadlineExceeded); err == nil || took != timeout {
			t.Fatalf("a caller's own deadline behind the hung sync: %v, took %v, want its deadline", err, took)
		}
		if took, err := take(ErrTimeout); err == nil || took != timeout {
			t.Fatalf("behind the hung sync: %v, took %v, want the store's timeout", err, took)
		}
		for i := range 5 {
			if took, err := take(ErrTimeout); err != nil || took != 0 {
				t.Fatalf("decision %d after one waited out the store's time: %v, took %v, want at once", i, err, took)
			}
		}
		hang.Store(false)
		<-flushed
	})
}

// lostReply is a remote that, while lose is set, runs a sync and then
// fails it, as when the connection breaks before the reply.
type lostReply struct {
	*Model
	lose *atomic.Bool
}

var errLostReply = errors.New("lost reply")

func (r lostReply) Add(ctx context.Context, items []Item) error {
	if err := r.Model.Add(ctx, items); err != nil {
		return err
	}
	if r.lose.Load() {
		return errLostReply
	}
	return nil
}

// A failed sync's negative count (refunds past what the instance admitted
// since its last sync) is not sent again: the remote may have applied it,
// and sent again it gave back twice, so the key admitted past its limit.
// Lost, it only counts more. Positive counts still go again (run twice,
// they only count more; lost, they would admit past the limit).
func TestFailedSyncGivesBackOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var lose atomic.Bool
		m := NewModel()
		s := New(lostReply{m, &lose}, Sync, time.Second, WithoutLoop())
		defer s.Close()
		l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
		req := ratekeeper.Request{Key: "k", Limit: l, N: 1}
		var ds []ratekeeper.Decision
		for range 3 {
			d, err := s.Take(ctx, req)
			if err != nil || !d.Allowed {
				t.Fatalf("take: %+v %v", d, err)
			}
			ds = append(ds, d)
		}
		s.Flush()
		if n := m.State("k", l).Window.Count; n != 3 {
			t.Fatalf("the remote counts %d, want 3", n)
		}
		for _, d := range ds[:2] {
			if err := s.Refund(ctx, req, d); err != nil {
				t.Fatal(err)
			}
		}
		lose.Store(true)
		s.Flush() // the remote gives back 2, and the reply is lost
		lose.Store(false)
		d, err := s.Take(ctx, req) // a positive count beside it goes too
		if err != nil || !d.Allowed {
			t.Fatalf("take: %+v %v", d, err)
		}
		s.Flush()
		if n := m.State("k", l).Window.Count; n != 2 {
			t.Fatalf("the remote counts %d, want 2: 3 taken, 2 given back once, 1 more", n)
		}
	})
}
