package redisstore

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

// A primary that leaves without another coming (its slots moved to the
// other primaries: a Cluster scaled in) has its batcher retired too, and
// its flushers with it. Before, only a new primary's first call started a
// prune, so such a batcher and its two goroutines stayed for the store's
// life (and one more for each primary that ever left so).
func TestBatcherOfAPrimaryThatLeftIsRetired(t *testing.T) {
	const retireWithin = 30 * time.Second // three periodic prunes
	if testing.Short() {
		t.Skip("waits for a periodic prune")
	}
	s := openCluster(t)
	ctx := context.Background()
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1_000_000, Period: time.Hour}
	by := keysByPrimary(t, s, l, 2)
	takeAll := func() {
		t.Helper()
		for _, keys := range by {
			for _, k := range keys {
				if _, err := s.Take(ctx, ratekeeper.Request{Key: k, Limit: l, N: 1}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	takeAll()
	var gone string
	for p := range by {
		gone = p
		break
	}
	if _, ok := s.pipe.nodes.Load(gone); !ok {
		t.Fatalf("no batcher for %s after calls on its keys", gone)
	}
	node := redis.NewClient(&redis.Options{Addr: gone})
	id, err := node.Do(ctx, "CLUSTER", "MYID").Text()
	node.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Every slot of gone moves to the others, keys and all.
	out, err := exec.Command("redis-cli", "--cluster", "rebalance", gone, "--cluster-weight", id+"=0").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster rebalance: %v: %s", err, out)
	}
	for end := time.Now().Add(retireWithin); ; {
		takeAll()
		moved := true
		for _, keys := range by {
			for _, k := range keys {
				moved = moved && s.Part(ratekeeper.Request{Key: k, Limit: l}) != gone
			}
		}
		if _, ok := s.pipe.nodes.Load(gone); moved && !ok {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the batcher of %s, which holds no slot now (its keys moved: %v), is still in use %v later", gone, moved, retireWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
