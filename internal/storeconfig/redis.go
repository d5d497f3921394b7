package storeconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/metrics"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// openRedis connects to Redis (failing now if it does not answer) and
// wraps the store in failsafe with the configured timeout, policy and
// instance count.
func openRedis(ctx context.Context, c Config, logger *slog.Logger) (ratekeeper.Store, io.Closer, error) {
	policy, err := failsafe.ParsePolicy(c.OnError)
	if err != nil {
		return nil, nil, fmt.Errorf("store: on_error: %w", err)
	}
	rs, err := redisstore.Open(ctx, c.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	fs := failsafe.New(rs,
		failsafe.WithTimeout(c.Timeout),
		failsafe.WithPolicy(policy),
		failsafe.WithInstances(c.Instances),
		failsafe.WithLogger(logger),
	)
	return fs, closers{fs, rs}, nil
}

// closers closes each in turn: the failsafe wrapper, then Redis.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// FallbackStats returns a reader of s's fallback counters for
// metrics.CollectFallback when s is a failsafe store (a Redis URL), and
// false otherwise.
func FallbackStats(s ratekeeper.Store) (func() metrics.FallbackStats, bool) {
	fs, ok := s.(*failsafe.Store)
	if !ok {
		return nil, false
	}
	return func() metrics.FallbackStats {
		st := fs.Stats()
		return metrics.FallbackStats{Errors: st.Errors, Allowed: st.FallbackAllowed, Denied: st.FallbackDenied, Local: st.FallbackLocal}
	}, true
}
