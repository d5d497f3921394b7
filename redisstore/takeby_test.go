package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestTakeBy: TakeBy decides as Take within its deadline, alone and in
// batches, and refuses to run past it.
func TestTakeBy(t *testing.T) {
	url := redistest.Server(t)
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "direct"}[pipelined], func(t *testing.T) {
			s := open(t, url, redisstore.WithAutoPipeline(pipelined))
			ctx := context.Background()
			lim := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 50, Period: time.Hour}
			key := t.Name() + time.Now().Format(time.RFC3339Nano)
			const callers = 32
			var (
				wg       sync.WaitGroup
				allowed  atomic.Int64
				late     atomic.Int64
				mu       sync.Mutex
				firstErr error
			)
			for c := range callers {
				wg.Go(func() {
					for i := range 4 {
						deadline := time.Now().Add(5 * time.Second)
						if (c+i)%2 == 1 {
							deadline = time.Now().Add(-time.Millisecond) // already past
						}
						d, err := s.TakeBy(ctx, ratekeeper.Request{Key: key, Limit: lim, N: 1}, deadline)
						switch {
						case err == nil && (c+i)%2 == 0:
							if d.Allowed {
								allowed.Add(1)
							}
						case err != nil && (c+i)%2 == 1:
							late.Add(1)
						default:
							mu.Lock()
							if firstErr == nil {
								firstErr = err
								if err == nil {
									firstErr = errors.New("a call past its deadline was decided")
								}
							}
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if firstErr != nil {
				t.Fatal(firstErr)
			}
			if got := allowed.Load(); got != 50 {
				t.Errorf("%d allowed of %d calls in time with a limit of 50", got, callers*2)
			}
			if got := late.Load(); got != callers*2 {
				t.Errorf("%d of %d calls past their deadline refused", got, callers*2)
			}
		})
	}
}
