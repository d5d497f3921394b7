package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// BenchmarkRedisCalendar decides a calendar window (monthly, in
// Europe/Berlin) and an epoch fixed window of a day side by side, on one
// server, at 1 and 64 callers, with BenchmarkRedis's metrics (server-Ir/op
// too under callgrind, as bench/run-redis.sh runs it). The monthly window
// in lease mode shows what a long window saves: a lease holds a share of a
// month's quota, so few decisions ask the server.
func BenchmarkRedisCalendar(b *testing.B) {
	cg := callgrindFromEnv(b)
	url := redisURL(b)
	admin, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	ac := redis.NewClient(admin)
	defer ac.Close()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	monthly := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: benchRate, Calendar: ratekeeper.Monthly, Location: berlin}
	impls := []impl{
		{"epoch", ratekeeperLimit(ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: benchRate, Period: 24 * time.Hour})},
		{"calendar", ratekeeperLimit(monthly)},
		{"calendar-lease", ratekeeperLimit(monthly, redisstore.WithMode(redisstore.Lease, 0))},
	}
	for _, c := range []int{1, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("callers=%d/impl=%s", c, im.name), func(b *testing.B) {
				decide, closeFn := im.open(b, url)
				defer closeFn()
				load(b, ac, c, decide, cg)
			})
		}
	}
}
