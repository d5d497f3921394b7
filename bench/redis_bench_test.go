package bench

// Redis benchmarks: decisions per second and p50/p99 latency at 1, 16, 64
// and 256 concurrent callers, ratekeeper's Redis store (each algorithm) side
// by side with go-redis/redis_rate and ulule/limiter's Redis store, and the
// Redis server's CPU per decision. bench/run-redis.sh starts the server and
// sets RK_BENCH_REDIS; without it these benchmarks skip.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// callers are the concurrencies measured.
var callers = []int{1, 16, 64, 256}

// benchKeys is how many distinct client keys each implementation spreads
// its decisions over.
const benchKeys = 1000

// benchRate is a limit high enough that nearly every decision is allowed,
// the same work for every implementation.
const benchRate = 1_000_000

func redisURL(b *testing.B) string {
	u := os.Getenv("RK_BENCH_REDIS")
	if u == "" {
		b.Skip("RK_BENCH_REDIS is not set: run bench/run-redis.sh")
	}
	return u
}

// decider makes one decision for key i.
type decider func(ctx context.Context, i int) error

// impl is one implementation under test; open builds it on a server.
type impl struct {
	name string
	open func(b *testing.B, url string) (decider, func())
}

// cpuImpl is an implementation measured by BenchmarkRedisServerCPU only,
// after warm decisions per key.
type cpuImpl struct {
	impl
	warm int
}

var keyNames = func() []string {
	k := make([]string, benchKeys)
	for i := range k {
		k[i] = "bench:" + strconv.Itoa(i)
	}
	return k
}()

func ratekeeperImpl(a ratekeeper.Algorithm, opts ...redisstore.Option) func(b *testing.B, url string) (decider, func()) {
	return ratekeeperLimit(ratekeeper.Limit{Algorithm: a, Rate: benchRate, Period: time.Second}, opts...)
}

func ratekeeperLimit(l ratekeeper.Limit, opts ...redisstore.Option) func(b *testing.B, url string) (decider, func()) {
	return func(b *testing.B, url string) (decider, func()) {
		s, err := redisstore.Open(context.Background(), url, opts...)
		if err != nil {
			b.Fatal(err)
		}
		lim, err := ratekeeper.New(s, l)
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, i int) error {
			_, err := lim.Allow(ctx, keyNames[i])
			return err
		}, func() { s.Close() }
	}
}

func redisRateImpl(b *testing.B, url string) (decider, func()) {
	o, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	o.Protocol = 2
	c := redis.NewClient(o)
	l := redis_rate.NewLimiter(c)
	limit := redis_rate.PerSecond(benchRate)
	return func(ctx context.Context, i int) error {
		_, err := l.Allow(ctx, keyNames[i], limit)
		return err
	}, func() { c.Close() }
}

func ululeImpl(b *testing.B, url string) (decider, func()) {
	o, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	o.Protocol = 2
	c := redis.NewClient(o)
	store, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule", MaxRetry: 3})
	if err != nil {
		b.Fatal(err)
	}
	l := limiter.New(store, limiter.Rate{Period: time.Second, Limit: benchRate})
	return func(ctx context.Context, i int) error {
		_, err := l.Get(ctx, keyNames[i])
		return err
	}, func() { c.Close() }
}

// tokenScript is ratekeeper's token bucket script as redisstore builds it
// (redisstore/scripts.go), for the client comparison: the same script
// through other clients.
func tokenScript(b *testing.B) string {
	read := func(f string) string {
		s, err := os.ReadFile("../redisstore/scripts/" + f)
		if err != nil {
			b.Fatal(err)
		}
		return string(s)
	}
	return read("prelude.lua") + read("single.lua") + read("bucket.lua")
}

// tokenArgs are the script's arguments for an Allow of the bench limit,
// packed as redisstore packs them (redisstore/scripts/prelude.lua): the call
// (op m, n 1, now NaN: the server's TIME) and the limit (rate, period in µs,
// least TTL, burst).
var tokenArgs = []string{
	"m" + packFloats(1, math.NaN()),
	packFloats(benchRate, 1_000_000, 0, benchRate),
}

// packFloats packs v as little-endian doubles, the Lua struct library's '<d'.
func packFloats(v ...float64) string {
	b := make([]byte, 0, 8*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return string(b)
}

func scriptKey(i int) string { return "cmp:{" + keyNames[i] + "}:tb" }

func rueidisImpl(b *testing.B, url string) (decider, func()) {
	o, err := rueidis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		b.Fatal(err)
	}
	script := rueidis.NewLuaScript(tokenScript(b))
	return func(ctx context.Context, i int) error {
		return script.Exec(ctx, c, []string{scriptKey(i)}, tokenArgs).Error()
	}, c.Close
}

func goredisAutoPipelineImpl(b *testing.B, url string) (decider, func()) {
	o, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	o.Protocol = 2
	c := redis.NewClient(o)
	ap, err := c.AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	script := redis.NewScript(tokenScript(b))
	args := make([]any, len(tokenArgs))
	for i, a := range tokenArgs {
		args[i] = a
	}
	return func(ctx context.Context, i int) error {
		return script.Run(ctx, ap, []string{scriptKey(i)}, args...).Err()
	}, func() { c.Close() }
}

var redisImpls = []impl{
	{"redis_rate", redisRateImpl},
	{"ulule", ululeImpl},
	{"rk-token_bucket", ratekeeperImpl(ratekeeper.TokenBucket)},
	{"rk-token_bucket-nopipeline", ratekeeperImpl(ratekeeper.TokenBucket, redisstore.WithAutoPipeline(false))},
	{"rk-leaky_bucket", ratekeeperImpl(ratekeeper.LeakyBucket)},
	{"rk-fixed_window", ratekeeperImpl(ratekeeper.FixedWindow)},
	{"rk-sliding_log", ratekeeperImpl(ratekeeper.SlidingLog)},
	{"rk-sliding_window", ratekeeperImpl(ratekeeper.SlidingWindow)},
	{"tb-script-rueidis", rueidisImpl},
	{"tb-script-goredis-autopipeline", goredisAutoPipelineImpl},
}

// cpuImpls are measured by BenchmarkRedisServerCPU: every implementation
// with each key's state as a second of sequential decisions leaves it, and
// the sliding log with 60 entries per key (a window of an hour), as under
// load (at 60k decisions/s over 1000 keys a one-second window holds 60),
// since its script's cost grows with the entries in the window.
var cpuImpls = func() []cpuImpl {
	var c []cpuImpl
	for _, im := range redisImpls {
		c = append(c, cpuImpl{im, 1})
	}
	hour := ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: benchRate, Period: time.Hour}
	return append(c, cpuImpl{impl{"rk-sliding_log-60", ratekeeperLimit(hour)}, 60})
}()

// BenchmarkRedis runs every implementation at every concurrency. Besides
// ns/op (the inverse of throughput) it reports decisions/s, p50-µs and
// p99-µs (each call's latency), and server-µs/op: the Redis server's CPU
// time in commands per decision, from INFO commandstats.
func BenchmarkRedis(b *testing.B) {
	cg := callgrindFromEnv(b)
	url := redisURL(b)
	admin, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	ac := redis.NewClient(admin)
	defer ac.Close()
	for _, im := range redisImpls {
		for _, c := range callers {
			b.Run(fmt.Sprintf("impl=%s/callers=%d", im.name, c), func(b *testing.B) {
				decide, closeFn := im.open(b, url)
				defer closeFn()
				load(b, ac, c, decide, cg)
			})
		}
	}
}

// load makes b.N decisions from c goroutines and reports the metrics; with
// cg, also server-Ir/op, the server's instructions in EVALSHA per decision
// (under load, where ratekeeper runs many decisions per script).
func load(b *testing.B, admin *redis.Client, c int, decide decider, cg *callgrind) {
	ctx := context.Background()
	// Warm up: connections, script cache.
	for i := 0; i < 10; i++ {
		if err := decide(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	lat := make([][]time.Duration, c)
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ReportAllocs()
	srv0, srvOK := serverCPU(ctx, admin)
	if cg != nil {
		cg.zero(b)
	}
	cli0 := processCPU()
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < c; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, b.N/c+1)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					break
				}
				t0 := time.Now()
				if err := decide(ctx, int(i%benchKeys)); err != nil {
					failed.Store(err)
					break
				}
				mine = append(mine, time.Since(t0))
			}
			lat[g] = mine
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cli := processCPU() - cli0
	var ir float64
	if cg != nil {
		ir = cg.dump(b)
	}
	srv1, srv1OK := serverCPU(ctx, admin)
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / float64(time.Microsecond)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	if us, ok := serverUsec(ctx, admin); ok && b.N > 0 {
		b.ReportMetric(us/float64(b.N), "server-µs/op")
	}
	if b.N > 0 {
		b.ReportMetric(float64(cli)/float64(time.Microsecond)/float64(b.N), "client-cpu-µs/op")
		if srvOK && srv1OK {
			b.ReportMetric((srv1-srv0)*1e6/float64(b.N), "server-cpu-µs/op")
		}
		if cg != nil {
			b.ReportMetric(ir/float64(b.N), "server-Ir/op")
		}
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time in seconds the Redis server has used (user and
// system, all its threads), from INFO cpu.
func serverCPU(ctx context.Context, admin *redis.Client) (float64, bool) {
	info, err := admin.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, false
	}
	total, n := 0.0, 0
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, false
			}
			total += f
			n++
		}
	}
	return total, n == 2
}

// serverUsec is the server's CPU time in script runs (EVALSHA, EVAL) since
// the reset: every implementation measured runs each decision as one
// script. (Redis 7 also counts the commands a script calls under their own
// names, inside the script's time, so summing every command would count
// them twice.)
func serverUsec(ctx context.Context, admin *redis.Client) (float64, bool) {
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, false
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, _ := strconv.ParseFloat(v, 64)
				total += u
			}
		}
	}
	return total, true
}

// BenchmarkRedisServerCPU measures the Redis server's CPU per decision for
// each implementation: one caller makes cpuRounds rounds of b.N decisions,
// and the round with the least server time counts. The minimum is what the
// script costs; the other rounds add the machine's noise (the benchmark
// client and other work share the server's cores).
//
// With RK_BENCH_CALLGRIND=PID:OUTFILE, naming a redis-server run under
// valgrind --tool=callgrind --toggle-collect=evalShaCommand
// --callgrind-out-file=OUTFILE (bench/run-redis.sh does this), it also
// reports server-Ir/op, the instructions the server runs per script call:
// a count that the machine's load does not move.
func BenchmarkRedisServerCPU(b *testing.B) {
	cg := callgrindFromEnv(b)
	url := redisURL(b)
	admin, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	ac := redis.NewClient(admin)
	defer ac.Close()
	cpuRounds := 5
	if cg != nil {
		cpuRounds = 1 // exact, and valgrind is slow
	}
	ctx := context.Background()
	for _, im := range cpuImpls {
		b.Run("impl="+im.name, func(b *testing.B) {
			decide, closeFn := im.open(b, url)
			defer closeFn()
			for i := 0; i < benchKeys*im.warm; i++ { // every key exists, as under load
				if err := decide(ctx, i%benchKeys); err != nil {
					b.Fatal(err)
				}
			}
			if cg != nil {
				cg.zero(b)
			}
			best := -1.0
			b.ReportAllocs()
			b.ResetTimer()
			for r := 0; r < cpuRounds; r++ {
				if err := ac.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				for i := 0; i < b.N; i++ {
					if err := decide(ctx, i%benchKeys); err != nil {
						b.Fatal(err)
					}
				}
				if us, ok := serverUsec(ctx, ac); ok && (best < 0 || us < best) {
					best = us
				}
			}
			b.ReportMetric(best/float64(b.N), "server-µs/op")
			if cg != nil {
				b.ReportMetric(cg.dump(b)/float64(b.N), "server-Ir/op")
			}
		})
	}
}

// callgrind controls a redis-server run under callgrind.
type callgrind struct{ pid, out string }

func callgrindFromEnv(b *testing.B) *callgrind {
	v := os.Getenv("RK_BENCH_CALLGRIND")
	if v == "" {
		return nil
	}
	pid, out, ok := strings.Cut(v, ":")
	if !ok {
		b.Fatalf("RK_BENCH_CALLGRIND=%q: want PID:OUTFILE", v)
	}
	return &callgrind{pid, out}
}

// zero starts counting afresh.
func (c *callgrind) zero(b *testing.B) {
	if out, err := exec.Command("callgrind_control", "-z", c.pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control -z: %v: %s", err, out)
	}
}

// dump writes the counts since zero and returns their instructions.
func (c *callgrind) dump(b *testing.B) float64 {
	if out, err := exec.Command("callgrind_control", "-d", c.pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control -d: %v: %s", err, out)
	}
	files, _ := filepath.Glob(c.out + ".*")
	newest, at := "", time.Time{}
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.ModTime().After(at) {
			newest, at = f, st.ModTime()
		}
	}
	data, err := os.ReadFile(newest)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			ir, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				b.Fatal(err)
			}
			return ir
		}
	}
	b.Fatalf("%s: no summary line", newest)
	return 0
}
