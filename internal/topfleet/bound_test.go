package topfleet

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/topk"
)

// A record far over WithMaxBytes, put in Redis by another writer, is
// skipped without being read whole: a reader's memory is bounded by
// its instances times its bytes, whatever the store holds.
func TestReadBoundsRecordBytes(t *testing.T) {
	url := redistest.Server(t)
	clk := start()
	ctx := context.Background()
	c := client(t, url)
	f := New(c, topk.NewBoard(1), WithClock(clk))
	const huge = 64 << 20
	c.Set(ctx, f.recordKey("api", "huge", "1m"), strings.Repeat("x", huge), time.Minute)
	c.ZAdd(ctx, f.index("api"), redis.Z{Score: float64(clk.Now().UnixMilli()), Member: "huge"})
	c.HSet(ctx, f.recordKey("api", "hash", "1m"), "a", "b") // WRONGTYPE: skipped, not an error
	c.ZAdd(ctx, f.index("api"), redis.Z{Score: float64(clk.Now().UnixMilli()), Member: "hash"})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := f.Read(ctx, []string{"api"}, "1m", 3); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > huge/4 {
		t.Errorf("reading one record of %d MiB allocated %d MiB; over %d bytes it should be skipped unread", huge>>20, got>>20, DefaultMaxBytes)
	}
	if f.Skipped() != 1 {
		t.Errorf("%d records skipped, want 1", f.Skipped())
	}
}
