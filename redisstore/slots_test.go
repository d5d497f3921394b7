package redisstore_test

import (
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/storetest"
)

func TestConcurrencyConformance(t *testing.T) {
	s := open(t, redistest.Server(t))
	storetest.RunConcurrency(t, func(t *testing.T) ratekeeper.Store { return s })
}

func TestConcurrencyConformanceCluster(t *testing.T) {
	s := open(t, redistest.Cluster(t))
	storetest.RunConcurrency(t, func(t *testing.T) ratekeeper.Store { return s })
}
