package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

var scriptCalls = regexp.MustCompile(`cmdstat_eval(?:sha)?:calls=([0-9]+)`)

// BenchmarkBanCheck is the decision of one rule keyed by IP across 1024
// clients, none banned, without and with a ban: what the ban check costs.
// On Redis it reports the scripts Redis ran per decision (round trips):
// the check runs in the take's script, so it stays at most 1.
func BenchmarkBanCheck(b *testing.B) {
	for _, store := range []string{"memory", "redis"} {
		for _, ban := range []string{"", "    ban: 1h\n"} {
			b.Run(fmt.Sprintf("store=%s/ban=%t", store, ban != ""), func(b *testing.B) {
				benchBan(b, store, ban)
			})
		}
	}
}

func benchBan(b *testing.B, store, ban string) {
	var s ratekeeper.Store
	var rs *redisstore.Store
	if store == "memory" {
		ms := memstore.New()
		b.Cleanup(func() { ms.Close() })
		s = ms
	} else {
		var err error
		if rs, err = redisstore.Open(b.Context(), redistest.Server(b)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rs.Close() })
		s = rs
	}
	mw, err := New(s, mustSet(b, "rules:\n  - name: login\n    key: [ip]\n    limit: {algorithm: token_bucket, rate: 1000000, period: 1s}\n"+ban))
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/", nil)
		reqs[i].RemoteAddr = fmt.Sprintf("192.0.%d.%d:5000", i/256, i%256)
	}
	commands := func() int64 {
		if rs == nil {
			return 0
		}
		info, err := rs.Client().Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		for _, m := range scriptCalls.FindAllStringSubmatch(info, -1) {
			c, _ := strconv.ParseInt(m[1], 10, 64)
			n += c
		}
		return n
	}
	before := commands()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		sc := new(scratch)
		ctx := context.Background()
		i := 0
		for pb.Next() {
			if v := mw.decide(ctx, nil, reqs[i&1023], sc, nil); v.outcome != pass {
				b.Fatal("refused")
			}
			i++
		}
	})
	b.StopTimer()
	if rs != nil {
		b.ReportMetric(float64(commands()-before)/float64(b.N), "scripts/op")
	}
}
