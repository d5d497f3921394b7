package storeconfig

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/ratekeeper/ratekeeper"
)

// openRedis is replaced by the Redis store and its failsafe wrapper once
// those packages exist.
func openRedis(_ context.Context, c Config, _ *slog.Logger) (ratekeeper.Store, io.Closer, error) {
	return nil, nil, fmt.Errorf("store: %s: %w", redactURL(c.URL), ErrRedisUnavailable)
}
