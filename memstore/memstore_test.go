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
