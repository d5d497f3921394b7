// Command rlsload drives a rate limit service that speaks Envoy's gRPC API
// (envoy.service.ratelimit.v3) with concurrent callers and prints, in the Go
// benchmark format that benchstat reads, the decisions per second and the
// p50 and p99 latencies of each configuration:
//
//	BenchmarkRLS/alg=fixed_window/keys=1/callers=64/impl=ratekeeper  N  ns/op  decisions/s  p50-µs  p99-µs
//
// Each run is bounded in time (-duration) and in calls (-max-calls). Every
// caller sends one descriptor (ALGORITHM, KEY) in domain "bench", where KEY
// cycles through -keys distinct values.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	var (
		addr     = flag.String("addr", "127.0.0.1:8081", "the service's gRPC `address`")
		impl     = flag.String("impl", "ratekeeper", "the implementation's `name` in the output")
		algs     = flag.String("algorithms", "fixed_window", "comma-separated descriptor keys (one per algorithm)")
		keys     = flag.String("keys", "1,10000", "comma-separated numbers of distinct keys")
		callers  = flag.String("callers", "16,64,256", "comma-separated numbers of concurrent callers")
		duration = flag.Duration("duration", 3*time.Second, "how long each configuration runs")
		warmup   = flag.Duration("warmup", 500*time.Millisecond, "unmeasured calls before each configuration")
		maxCalls = flag.Int("max-calls", 2_000_000, "bound on the calls of one configuration")
		conns    = flag.Int("conns", 4, "gRPC connections shared by the callers")
	)
	flag.Parse()
	pool := make([]rlsv3.RateLimitServiceClient, *conns)
	for i := range pool {
		cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(1)
		}
		defer cc.Close()
		pool[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	for _, alg := range strings.Split(*algs, ",") {
		for _, k := range ints(*keys) {
			for _, c := range ints(*callers) {
				run(pool, alg, k, c, *warmup, 0)
				r := run(pool, alg, k, c, *duration, *maxCalls)
				if r.errors > 0 || r.over > 0 {
					fmt.Fprintf(os.Stderr, "rlsload: %s %s keys=%d callers=%d: %d errors (first: %v), %d over the limit\n", *impl, alg, k, c, r.errors, r.firstErr, r.over)
				}
				if r.calls == 0 {
					continue
				}
				fmt.Printf("BenchmarkRLS/alg=%s/keys=%d/callers=%d/impl=%s \t%d\t%.0f ns/op\t%.0f decisions/s\t%.1f p50-µs\t%.1f p99-µs\n",
					alg, k, c, *impl, r.calls, float64(r.elapsed.Nanoseconds())/float64(r.calls),
					float64(r.calls)/r.elapsed.Seconds(), us(r.p50), us(r.p99))
			}
		}
	}
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "rlsload: %q is not a positive number\n", f)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

type result struct {
	calls, errors, over int
	firstErr            error
	elapsed             time.Duration
	p50, p99            time.Duration
}

// run has callers goroutines call ShouldRateLimit until d has passed or
// maxCalls calls were made (0: no bound but d). Calls in flight when d
// passes finish and count; each call is bounded by callTimeout.
func run(pool []rlsv3.RateLimitServiceClient, alg string, keys, callers int, d time.Duration, maxCalls int) result {
	var (
		stop atomic.Bool
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		res  result
		lats = make([][]time.Duration, callers)
	)
	// Requests are built once per key: the load generator's allocations
	// should not be what is measured.
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: alg, Value: "k" + strconv.Itoa(i)}},
		}}}
	}
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	start := time.Now()
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := pool[c%len(pool)]
			var errs, over int
			var first error
			l := make([]time.Duration, 0, 4096)
			for !stop.Load() {
				i := next.Add(1)
				if maxCalls > 0 && i > int64(maxCalls) {
					break
				}
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				t := time.Now()
				resp, err := client.ShouldRateLimit(ctx, reqs[int(i)%keys])
				lat := time.Since(t)
				cancel()
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				l = append(l, lat)
				if resp.OverallCode != rlsv3.RateLimitResponse_OK {
					over++
				}
			}
			lats[c] = l
			mu.Lock()
			res.errors += errs
			res.over += over
			if res.firstErr == nil {
				res.firstErr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	all := slices.Concat(lats...)
	slices.Sort(all)
	res.calls = len(all)
	if len(all) > 0 {
		res.p50 = all[len(all)/2]
		res.p99 = all[min(len(all)-1, len(all)*99/100)]
	}
	return res
}

// callTimeout bounds one call: a service that stops answering ends the
// run with errors rather than hanging it.
const callTimeout = 10 * time.Second
