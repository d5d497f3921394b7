package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// In sync mode, a Cluster primary that hangs holds up only its own keys'
// syncs: the loop goes on sending the live primaries' counts every period.
// Before, the loop synced each primary's keys in a call of its own but
// waited for all of them before its next turn, so while one primary hung
// the others' counts reached Redis once per loop timeout (1 s) instead of
// once per period (50 ms here), and no early sync ran meanwhile.
func TestSyncLoopKeepsItsPeriodBesideAHungPrimary(t *testing.T) {
	url := redistest.Cluster(t)
	const period = 50 * time.Millisecond
	ctx := context.Background()
	s, err := Open(ctx, url, WithMode(Sync, period))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exact := openURL(t, url)
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
	var victim, victimKey, liveKey string
	for p, ks := range keysByPrimary(t, s, l, 1) {
		if victim == "" {
			victim, victimKey = p, ks[0]
		} else if liveKey == "" {
			liveKey = ks[0]
		}
	}
	take := func(k string, n int) {
		t.Helper()
		if d, err := s.Take(ctx, ratekeeper.Request{Key: k, Limit: l, N: n}); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", k, d, err)
		}
	}
	// inRedis waits until key counts want in Redis, at most within.
	inRedis := func(k string, want int, within time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			d, err := exact.Take(ctx, ratekeeper.Request{Key: k, Limit: l, N: 0})
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Capacity() - d.Remaining; got == want {
				return
			}
			if time.Since(start) > within {
				t.Fatalf("%s: not %d in Redis %v after it was admitted (sync period %v)", k, want, within, period)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	take(victimKey, 1)
	take(liveKey, 1)
	inRedis(victimKey, 1, 5*time.Second)
	inRedis(liveKey, 1, 5*time.Second)
	node := redis.NewClient(&redis.Options{Addr: victim})
	defer node.Close()
	if err := node.Do(ctx, "CLIENT", "PAUSE", 5000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	// The victim's key first: the sync that sends the live key's count
	// holds the victim's too, whose call hangs.
	take(victimKey, 1)
	take(liveKey, 1)
	inRedis(liveKey, 2, 5*time.Second)
	take(liveKey, 5)
	inRedis(liveKey, 7, 6*period)
}
