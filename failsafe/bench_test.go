package failsafe_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// instant is a NetworkStore that allows everything at once: what the
// failsafe store itself costs on top of its primary.
type instant struct{}

func (instant) Take(_ context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	return ratekeeper.Decision{Allowed: true, Limit: req.Limit.Capacity(), Remaining: req.Limit.Capacity() - req.N}, nil
}

func (instant) TakeBy(ctx context.Context, req ratekeeper.Request, _ time.Time) (ratekeeper.Decision, error) {
	return instant{}.Take(ctx, req)
}

func (instant) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error { return nil }

func (instant) Part(ratekeeper.Request) string           { return "" }
func (instant) ProbePart(context.Context, string) error  { return nil }
func (instant) OnAnswer(func(part string)) (stop func()) { return func() {} }

var benchLimit = ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1 << 30, Period: time.Second}

// BenchmarkOverhead is a successful Take through the failsafe store to a
// primary that answers at once, from parallel callers: the breaker's
// admission, the deadline and the counters, and nothing else.
func BenchmarkOverhead(b *testing.B) {
	s := failsafe.New(instant{})
	defer s.Close()
	req := ratekeeper.Request{Key: "k", Limit: benchLimit, N: 1}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}

// BenchmarkRedis is the hot path of the gateway and of serve: a
// successful decision through the failsafe store (TakeBy, as storeconfig
// wires it) to a loopback redis-server, from parallel callers over 1024
// keys; and the same for a batch of two rules (TakeAll), as the middleware
// asks.
func BenchmarkRedis(b *testing.B) {
	url := redistest.Server(b)
	rs, err := redisstore.Open(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	// A timeout far above a loopback round trip: on a loaded machine one
	// call in tens of thousands outlasted the default 50ms, and a decision
	// by the policy is not the path measured here. The deadline costs the
	// same whatever its length.
	s := failsafe.New(rs, failsafe.WithTimeout(time.Second))
	defer s.Close()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.Run("take", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				d, err := s.Take(ctx, ratekeeper.Request{Key: keys[i&1023], Limit: benchLimit, N: 1})
				if err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
				i++
			}
		})
		if st := s.Stats(); st.Errors > 0 {
			b.Fatalf("store errors: %+v", st)
		}
	})
	b.Run("take_all", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			reqs := make([]ratekeeper.Request, 2)
			out := make([]ratekeeper.Decision, 2)
			i := 0
			for pb.Next() {
				reqs[0] = ratekeeper.Request{Key: keys[i&1023], Limit: benchLimit, N: 1}
				reqs[1] = ratekeeper.Request{Key: "global", Limit: benchLimit, N: 1}
				if all, err := s.TakeAll(ctx, reqs, out); err != nil || !all {
					b.Fatal(out, err)
				}
				i++
			}
		})
		if st := s.Stats(); st.Errors > 0 {
			b.Fatalf("store errors: %+v", st)
		}
	})
}
