package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// takeAllDifferential runs random batches (2 to 4 rules of random
// algorithms, one key each) through the memory store's TakeAll and the
// Redis store's, on the same instants, and demands the same answers. keyOf
// names rule j's key for client c. Unless strict, a refused batch is
// compared only up to its first refusal: ratekeeper.TakeEach's take-and-refund
// reports the requests after it as a peek (N = 0) would see them.
func takeAllDifferential(t *testing.T, got ratekeeper.BatchStore, seed uint64, strict bool, keyOf func(c, j int) string) (refused int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 42))
	want := memstore.New(memstore.WithJanitorInterval(0))
	defer want.Close()
	ctx := context.Background()
	prefix := fmt.Sprintf("batch:%x:", rand.Uint64())
	limits := make([]ratekeeper.Limit, 4)
	for i := range limits {
		limits[i] = storetest.RandomLimit(rng)
		limits[i].LogRejected = false // see TakeAll's doc
	}
	now := storetest.Epoch
	for step := 0; step < 400; step++ {
		now = now.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))).Truncate(time.Microsecond))
		c := rng.IntN(3)
		m := 2 + rng.IntN(3)
		reqs := make([]ratekeeper.Request, m)
		for j := range reqs {
			l := limits[j]
			n := 1
			if rng.IntN(4) == 0 {
				n = 1 + rng.IntN(l.Capacity())
			}
			reqs[j] = ratekeeper.Request{Key: prefix + keyOf(c, j), Limit: l, N: n, Reserve: rng.IntN(3) == 0, Now: now}
		}
		dw, dg := make([]ratekeeper.Decision, m), make([]ratekeeper.Decision, m)
		okw, errw := want.TakeAll(ctx, reqs, dw)
		okg, errg := got.TakeAll(ctx, reqs, dg)
		if errw != nil || errg != nil {
			t.Fatalf("step %d: %v / %v", step, errw, errg)
		}
		if !okw {
			refused++
		}
		if okw != okg {
			t.Fatalf("step %d: all allowed %v, want %v\nreqs %+v\nwant %+v\n got %+v", step, okg, okw, reqs, dw, dg)
		}
		for j := range dw {
			if !strict && j > 0 && !dw[j-1].Allowed {
				break
			}
			if !sameDecision(dw[j], dg[j]) {
				t.Fatalf("step %d request %d (%s, n=%d, reserve %v): all allowed %v\nwant %+v\n got %+v", step, j, reqs[j].Limit, reqs[j].N, reqs[j].Reserve, okw, dw[j], dg[j])
			}
		}
	}
	return refused
}

func TestTakeAllDifferential(t *testing.T) {
	s := open(t, redistest.Server(t))
	refused := 0
	for seed := uint64(1); seed <= 20; seed++ {
		refused += takeAllDifferential(t, s, seed, true, func(c, j int) string { return fmt.Sprintf("c%d:r%d", c, j) })
	}
	if refused < 100 || refused > 20*400-100 {
		t.Fatalf("%d of %d batches refused: the test should see many of both", refused, 20*400)
	}
	t.Logf("%d of %d batches refused", refused, 20*400)
}

func TestTakeAllCluster(t *testing.T) {
	s := open(t, redistest.Cluster(t))
	t.Run("conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) ratekeeper.Store { return s })
	})
	t.Run("differential", func(t *testing.T) { // against memstore, keys on every node
		for seed := uint64(1); seed <= 5; seed++ {
			m := memstore.New(memstore.WithJanitorInterval(0))
			storetest.DifferentialFunc(t, m, s, seed, 2000, sameDecision)
			m.Close()
			if t.Failed() {
				t.Fatalf("seed %d", seed)
			}
		}
	})
	t.Run("one_slot", func(t *testing.T) { // one script run per batch
		for seed := uint64(1); seed <= 5; seed++ {
			takeAllDifferential(t, s, seed, true, func(c, j int) string { return fmt.Sprintf("{c%d}:r%d", c, j) })
		}
	})
	t.Run("many_slots", func(t *testing.T) { // take and refund
		for seed := uint64(1); seed <= 5; seed++ {
			takeAllDifferential(t, s, seed, false, func(c, j int) string { return fmt.Sprintf("c%d:r%d", c, j) })
		}
	})
}
