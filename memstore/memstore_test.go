package memstore_test

import (
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) ratekeeper.Store {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestBoundMatchesTake runs random timelines through the store bound to each
// limit and through its Take, and demands the same decisions.
func TestBoundMatchesTake(t *testing.T) {
	for seed := range uint64(8) {
		plain, bound := memstore.New(), memstore.New()
		storetest.Differential(t, storetest.Unbound(plain), bound, seed, 4000)
		plain.Close()
		bound.Close()
	}
}
