package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// TestDifferentialConcurrent runs differential timelines from many
// goroutines at once on one store, each on keys of its own, so that their
// decisions, reservations, refunds and cancellations are coalesced into
// runs of many.lua; each must still get what the memory store answers.
func TestDifferentialConcurrent(t *testing.T) {
	differentialConcurrent(t, open(t, redistest.Server(t)))
}

// TestDifferentialConcurrentCluster: the same on Redis Cluster, where a
// batch is a pipeline of one script run per call.
func TestDifferentialConcurrentCluster(t *testing.T) {
	differentialConcurrent(t, open(t, redistest.Cluster(t)))
}

func differentialConcurrent(t *testing.T, s *redisstore.Store) {
	const goroutines = 24
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(strconv.Itoa(g), func(t *testing.T) {
				m := memstore.New(memstore.WithJanitorInterval(0))
				defer m.Close()
				storetest.DifferentialFunc(t, m, s, uint64(1000+g), 1000, sameDecision)
			})
		}()
	}
	wg.Wait()
}

// evalshaCalls is how many EVALSHA commands the server has run.
func evalshaCalls(t *testing.T, s *redisstore.Store) int {
	t.Helper()
	info, err := s.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// TestPipelineCoalesces: under concurrent load the pipeliner sends many
// decisions per script run, and waits for them rather than sending what
// little is pending as soon as it can.
func TestPipelineCoalesces(t *testing.T) {
	s := open(t, redistest.Server(t))
	lim, _ := ratekeeper.New(s, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1_000_000, Period: time.Second})
	ctx := context.Background()
	const callers, each = 64, 100
	before := evalshaCalls(t, s)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if d, err := lim.Allow(ctx, fmt.Sprintf("coalesce:%d:%d", g, i%10)); err != nil || !d.Allowed {
					errs <- fmt.Errorf("%+v %v", d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	runs := evalshaCalls(t, s) - before
	// A batch goes once it holds half the callers waiting (or when no
	// more can come): about 29 decisions a run here, counting the start and
	// the end, where callers are few; sending whatever is pending whenever
	// a flusher is free gives about 18.
	t.Logf("%d script runs for %d decisions", runs, callers*each)
	if runs*22 > callers*each {
		t.Errorf("%d script runs for %d decisions from %d callers: want at least 22 decisions a run", runs, callers*each, callers)
	}
}

// TestPipelineClose: calls racing with Close each get a decision or
// an error, none is left waiting, and calls after Close fail at once.
func TestPipelineClose(t *testing.T) {
	s := open(t, redistest.Server(t))
	lim, _ := ratekeeper.New(s, ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1_000_000, Period: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	started := make(chan struct{}, 32)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := lim.Allow(ctx, fmt.Sprintf("close:%d", g))
				if i == 0 {
					started <- struct{}{}
				}
				if err != nil {
					if ctx.Err() != nil {
						t.Errorf("caller %d: no answer before the test's deadline: %v", g, err)
					}
					return
				}
			}
		}()
	}
	for range 32 {
		<-started
	}
	s.Close()
	wg.Wait()
	if _, err := lim.Allow(ctx, "after"); err == nil {
		t.Error("Allow after Close: no error")
	}
}

// TestPipelineCancel: a caller whose context ends while its call is
// pending or in flight returns its context's error, and the others go on.
func TestPipelineCancel(t *testing.T) {
	s := open(t, redistest.Server(t))
	lim, _ := ratekeeper.New(s, ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 1_000_000, Period: time.Hour})
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				ctx, cancel := context.WithCancel(context.Background())
				if (g+i)%3 == 0 {
					cancel() // gone before it is sent
				} else if (g+i)%3 == 1 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%50)*time.Microsecond)
				}
				d, err := lim.Allow(ctx, fmt.Sprintf("cancel:%d", g))
				cancel()
				switch {
				// The socket's deadline, which go-redis sets from the
				// context's, is the same deadline.
				case err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded):
					t.Errorf("caller %d call %d: %v", g, i, err)
				case err == nil && !d.Allowed:
					t.Errorf("caller %d call %d: refused", g, i)
				}
			}
		}()
	}
	wg.Wait()
	if d, err := lim.Allow(context.Background(), "cancel:after"); err != nil || !d.Allowed {
		t.Errorf("after the cancellations: %+v %v", d, err)
	}
}
