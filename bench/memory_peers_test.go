package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// The memory part compares ratekeeper's memory store with golang.org/x/time/rate
// (one key), with the map + sync.Mutex + *rate.Limiter pattern people write by
// hand, and with the in-memory stores of sethvargo/go-limiter and
// ulule/limiter v3. Every contender gets the same limit: memManyRate requests per
// second with a burst of as many (ulule counts fixed windows of a second; the
// others are token buckets).

var memCtx = context.Background()

const (
	// memManyKeys is how many distinct clients the many-keys benchmarks spread
	// over.
	memManyKeys = 1_000_000
	// memManyRate is the many-keys limit per second (and burst). Keys drawn at
	// random from a million are each hit rarely, so nearly every decision
	// is an allowed one that updates state.
	memManyRate = 100
)

// memPeer is one contender behind a common signature: allow reports whether one
// request for key passes now.
type memPeer struct {
	name  string
	allow func(key string) bool
	close func()
}

// memPeerNames lists the many-keys contenders in the order they run.
var memPeerNames = []string{"ratekeeper", "map_mutex", "sethvargo", "ulule"}

// newMemPeer builds the named contender with the many-keys limit.
func newMemPeer(tb testing.TB, name string) memPeer {
	tb.Helper()
	switch name {
	case "ratekeeper":
		s := memstore.New(memstore.WithMaxKeys(4 * memManyKeys))
		lim, err := ratekeeper.New(s, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: memManyRate, Period: time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		return memPeer{name, func(k string) bool {
			d, err := lim.Allow(memCtx, k)
			return err == nil && d.Allowed
		}, func() { s.Close() }}
	case "map_mutex":
		m := newMemMapMutex(rate.Limit(memManyRate), memManyRate)
		return memPeer{name, m.allow, func() {}}
	case "sethvargo":
		s, err := memorystore.New(&memorystore.Config{
			Tokens: memManyRate, Interval: time.Second,
			SweepInterval: time.Hour, SweepMinTTL: time.Hour,
		})
		if err != nil {
			tb.Fatal(err)
		}
		return memPeer{name, func(k string) bool {
			_, _, _, ok, err := s.Take(memCtx, k)
			return err == nil && ok
		}, func() { s.Close(memCtx) }}
	case "ulule":
		lim := ulule.New(ulmemory.NewStoreWithOptions(ulule.StoreOptions{
			Prefix: "bench", CleanUpInterval: time.Hour,
		}), ulule.Rate{Period: time.Second, Limit: memManyRate})
		return memPeer{name, func(k string) bool {
			c, err := lim.Get(memCtx, k)
			return err == nil && !c.Reached
		}, func() {}}
	}
	tb.Fatalf("unknown peer %q", name)
	return memPeer{}
}

// memMapMutex is the pattern many services write by hand: one map of
// *rate.Limiter behind one mutex.
type memMapMutex struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	r     rate.Limit
	burst int
}

func newMemMapMutex(r rate.Limit, burst int) *memMapMutex {
	return &memMapMutex{m: make(map[string]*rate.Limiter), r: r, burst: burst}
}

func (m *memMapMutex) allow(key string) bool {
	m.mu.Lock()
	l, ok := m.m[key]
	if !ok {
		l = rate.NewLimiter(m.r, m.burst)
		m.m[key] = l
	}
	m.mu.Unlock()
	return l.Allow()
}

var (
	memKeysOnce sync.Once
	memKeyList  []string
)

// memKeys is memManyKeys distinct client keys, built once per process, shaped
// like the keys a gateway derives ("ip:" and an address).
func memKeys() []string {
	memKeysOnce.Do(func() {
		memKeyList = make([]string, memManyKeys)
		for i := range memKeyList {
			memKeyList[i] = fmt.Sprintf("ip:10.%d.%d.%d", i>>16, (i>>8)&0xff, i&0xff)
		}
		r := rand.New(rand.NewPCG(1, 2))
		r.Shuffle(len(memKeyList), func(i, j int) { memKeyList[i], memKeyList[j] = memKeyList[j], memKeyList[i] })
	})
	return memKeyList
}

// TestMemoryPeersAgree checks that every contender is configured with the same
// limit: a fresh key gets exactly memManyRate requests at once, then a refusal.
func TestMemoryPeersAgree(t *testing.T) {
	for _, name := range memPeerNames {
		t.Run(name, func(t *testing.T) {
			p := newMemPeer(t, name)
			defer p.close()
			for i := range memManyRate {
				if !p.allow("agree") {
					t.Fatalf("request %d of a fresh key refused; want %d to pass", i+1, memManyRate)
				}
			}
			if p.allow("agree") {
				t.Fatalf("request %d of a fresh key passed; the limit is %d", memManyRate+1, memManyRate)
			}
		})
	}
}
