package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

// BenchmarkRedisCalendar decides a calendar window (monthly, in
// Europe/Berlin) and an epoch fixed window of a day side by side, on one
// server, at 1 and 64 callers, with BenchmarkRedis's metrics (server-Ir/op
// too under callgrind, as bench/run-redis.sh runs it).
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
	impls := []impl{
		{"epoch", ratekeeperLimit(ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: benchRate, Period: 24 * time.Hour})},
		{"calendar", ratekeeperLimit(ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: benchRate, Calendar: ratekeeper.Monthly, Location: berlin})},
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
