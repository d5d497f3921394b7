package memstore_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// TestTakeAllMatchesOneByOne runs random batches (every algorithm, Allow and
// Reserve, costs 0 to 3, new and known keys, a small shard count so that
// batches share locks) through TakeAll, and checks each against a
// reference: a fresh store that replays every batch TakeAll let through and
// then decides the new batch's requests one by one. TakeAll must report
// exactly those decisions, pass iff all of them are allowed, and leave no
// trace of a refused batch (which the next steps' references check).
func TestTakeAllMatchesOneByOne(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { takeAllTimeline(t, seed) })
	}
}

func takeAllTimeline(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	var limits []ratekeeper.Limit
	for _, a := range ratekeeper.Algorithms {
		l := storetest.RandomLimit(rng)
		l.Algorithm = a
		l.Rate = 1 + rng.IntN(4)
		l.Burst = 0
		if a == ratekeeper.TokenBucket || a == ratekeeper.LeakyBucket {
			l.Burst = rng.IntN(4)
		}
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		limits = append(limits, l)
	}
	type step struct {
		reqs []ratekeeper.Request
	}
	var passed []step
	got := memstore.New(memstore.WithShards(2), memstore.WithJanitorInterval(0))
	defer got.Close()
	now := storetest.Epoch
	for i := 0; i < 250; i++ {
		now = now.Add(time.Duration(rng.Int64N(int64(limits[0].Period/2))) + time.Microsecond)
		// A batch of 1 to 4 distinct (key, limit) pairs.
		used := map[string]bool{}
		var reqs []ratekeeper.Request
		for range 1 + rng.IntN(4) {
			l := limits[rng.IntN(len(limits))]
			key := fmt.Sprintf("k%d", rng.IntN(5))
			if used[key+string(l.Algorithm)] {
				continue
			}
			used[key+string(l.Algorithm)] = true
			reqs = append(reqs, ratekeeper.Request{Key: key, Limit: l, N: rng.IntN(min(4, l.Capacity()+1)), Reserve: rng.IntN(3) == 0, Now: now})
		}
		// The reference.
		ref := memstore.New(memstore.WithJanitorInterval(0))
		for _, st := range passed {
			for _, r := range st.reqs {
				if d, _ := ref.Take(ctx, r); !d.Allowed {
					t.Fatalf("step %d: replay refused %+v", i, r)
				}
			}
		}
		want := make([]ratekeeper.Decision, len(reqs))
		wantOK := true
		for j, r := range reqs {
			want[j], _ = ref.Take(ctx, r)
			wantOK = wantOK && want[j].Allowed
		}
		ref.Close()
		if !wantOK { // a refused batch took nothing: its decisions say what is left
			ratekeeper.Untaken(reqs, want)
		}

		out := make([]ratekeeper.Decision, len(reqs))
		ok, err := got.TakeAll(ctx, reqs, out)
		if err != nil {
			t.Fatal(err)
		}
		if ok != wantOK {
			t.Fatalf("step %d: TakeAll(%+v) = %v, want %v (decisions %+v, want %+v)", i, reqs, ok, wantOK, out, want)
		}
		for j := range reqs {
			if out[j] != want[j] {
				t.Fatalf("step %d request %d (%+v): decision %+v, want %+v", i, j, reqs[j], out[j], want[j])
			}
		}
		if ok {
			passed = append(passed, step{reqs})
		}
	}
}

// After a refusal, a batch decided key by key (ratekeeper.TakeEach: the
// later requests asked at cost 0) reads as the memory store's batch: every
// Remaining is what is left. The later ones read their cost too high when
// callers added it back to decisions that had taken nothing.
func TestTakeEachReadsAsTakeAll(t *testing.T) {
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Minute}
	for _, refusedAt := range []int{0, 1, 2} {
		batch := memstore.New(memstore.WithJanitorInterval(0))
		each := memstore.New(memstore.WithJanitorInterval(0))
		reqs := make([]ratekeeper.Request, 3)
		for i := range reqs {
			reqs[i] = ratekeeper.Request{Key: fmt.Sprint("k", i), Limit: l, N: 2, Now: storetest.Epoch}
			// Each key has 4 taken; the refused one has 9.
			used := 4
			if i == refusedAt {
				used = 9
			}
			for _, s := range []*memstore.Store{batch, each} {
				if d, _ := s.Take(ctx, ratekeeper.Request{Key: reqs[i].Key, Limit: l, N: used, Now: storetest.Epoch}); !d.Allowed {
					t.Fatal("setup refused")
				}
			}
		}
		got, want := make([]ratekeeper.Decision, 3), make([]ratekeeper.Decision, 3)
		okB, _ := batch.TakeAll(ctx, reqs, want)
		okE, _ := ratekeeper.TakeEach(ctx, reqs, got, each.Take, each.Refund)
		if okB || okE {
			t.Fatalf("refused at %d: TakeAll %v, TakeEach %v; want both false", refusedAt, okB, okE)
		}
		for i := range reqs {
			left := 6
			if i == refusedAt {
				left = 1
			}
			if want[i].Remaining != left || got[i].Remaining != left {
				t.Fatalf("refused at %d, request %d: Remaining %d by batch, %d key by key; want %d (nothing taken)", refusedAt, i, want[i].Remaining, got[i].Remaining, left)
			}
		}
		batch.Close()
		each.Close()
	}
}
