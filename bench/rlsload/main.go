// Command rlsload drives a rate limit service that speaks Envoy's gRPC API
// (envoy.service.ratelimit.v3) with concurrent callers. It prints the
// decisions per second and the p50 and p99 latencies of each configuration,
// in the Go benchmark format that benchstat reads:
//
//	BenchmarkRLS/alg=fixed_window/keys=1/callers=64/impl=ratekeeper  N  ns/op  decisions/s  p50-µs  p99-µs
//
// Each run is bounded in time (-duration) and in calls (-max-calls). With
// -api envoy (ShouldRateLimit) every call sends one descriptor (ALGORITHM,
// KEY) in domain "bench"; with -api gubernator (gubernator's GetRateLimits)
// one rate limit named ALGORITHM with unique key KEY. KEY cycles through
// -keys distinct values.
//
// With -client lean (the default) the calls go over a lean gRPC client of
// its own (lean.go). It writes and reads HTTP/2 frames with
// golang.org/x/net/http2 and hpack, from pre-encoded headers and messages.
// It spends a fraction of grpc-go's CPU per call, so it stands in for
// Envoy's C++ client. With -client grpc the calls use grpc-go's client.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
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
		client   = flag.String("client", "lean", "the gRPC `client`: lean (HTTP/2 frames written directly) or grpc (grpc-go)")
		api      = flag.String("api", "envoy", "the `API` spoken: envoy (ShouldRateLimit) or gubernator (GetRateLimits)")
		cpuprof  = flag.String("cpuprofile", "", "write the load generator's CPU profile to `file`")
	)
	flag.Parse()
	if os.Getenv("GOGC") == "" {
		// The generator shares the machine's cores with the services: a
		// quarter of the collector's work (as ratekeeper serve does).
		debug.SetGCPercent(400)
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	var newCaller func(alg string, keys int) caller
	switch *client {
	case "grpc":
		var conn []*grpc.ClientConn
		for range *conns {
			cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				fmt.Fprintln(os.Stderr, "rlsload:", err)
				os.Exit(1)
			}
			defer cc.Close()
			conn = append(conn, cc)
		}
		switch *api {
		case "envoy":
			newCaller = func(alg string, keys int) caller { return envoyCaller(conn, alg, keys) }
		case "gubernator":
			newCaller = func(alg string, keys int) caller { return gubernatorCaller(conn, alg, keys) }
		}
	case "lean":
		path := map[string]string{"envoy": rlsv3.RateLimitService_ShouldRateLimit_FullMethodName,
			"gubernator": gubernator.V1_GetRateLimits_FullMethodName}[*api]
		if path == "" {
			break
		}
		lc, err := newLeanClient(*addr, path, *conns, slices.Max(ints(*callers)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(1)
		}
		defer lc.Close()
		switch *api {
		case "envoy":
			newCaller = func(alg string, keys int) caller { return leanEnvoyCaller(lc, alg, keys) }
		case "gubernator":
			newCaller = func(alg string, keys int) caller { return leanGubernatorCaller(lc, alg, keys) }
		}
	default:
		fmt.Fprintf(os.Stderr, "rlsload: -client %q: want lean or grpc\n", *client)
		os.Exit(2)
	}
	if newCaller == nil {
		fmt.Fprintf(os.Stderr, "rlsload: -api %q: want envoy or gubernator\n", *api)
		os.Exit(2)
	}
	for _, alg := range strings.Split(*algs, ",") {
		for _, k := range ints(*keys) {
			call := newCaller(alg, k)
			for _, c := range ints(*callers) {
				run(call, c, *warmup, 0)
				r := run(call, c, *duration, *maxCalls)
				if r.errors > 0 || r.over > 0 {
					fmt.Fprintf(os.Stderr, "rlsload: %s %s keys=%d callers=%d: %d errors (first: %v), %d over the limit\n", *impl, alg, k, c, r.errors, r.firstErr, r.over)
				}
				if r.calls == 0 || r.elapsed <= 0 {
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
	calls, errors, over int // calls: answered within the window
	firstErr            error
	elapsed             time.Duration
	p50, p99            time.Duration
}

// run has callers goroutines call ShouldRateLimit until d has passed or
// maxCalls calls were made (0: no bound but d). It waits for the calls in
// flight at that moment, so that none of them runs into the next
// configuration. The rate is the calls answered within the window over its
// length; the concurrency is full all along it. The latencies are those of
// every call started within the window, the late ones included. Leaving
// them out would favour the short calls.
//
// Each call is bounded by callTimeout past the window. One context serves
// the whole run: a context and timer per call would be the load generator's
// cost, not the service's. The context is cancelled then rather than given
// a deadline. With a deadline, gRPC would send the time left as a
// grpc-timeout header, different on every call. Neither side's HPACK table
// can index it, so encoding and decoding it cost both sides CPU. The
// service would also arm a timer per call for it. Envoy sends its fixed
// timeout, which HPACK indexes after the first call.
func run(call caller, callers int, d time.Duration, maxCalls int) result {
	var (
		stop atomic.Bool
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		res  result
		lats = make([][]time.Duration, callers)
	)
	start := time.Now()
	deadline := start.Add(d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bound := time.AfterFunc(d+callTimeout, cancel)
	defer bound.Stop()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	var inWindow atomic.Int64
	var lastInWindow atomic.Int64 // the end of the window when maxCalls ends it early
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var errs, over int
			var first error
			l := make([]time.Duration, 0, 4096)
			for !stop.Load() {
				i := next.Add(1)
				if maxCalls > 0 && i > int64(maxCalls) {
					break
				}
				t := time.Now()
				ok, err := call(ctx, c, int(i))
				end := time.Now()
				lat := end.Sub(t)
				if end.Before(deadline) {
					inWindow.Add(1)
					for {
						last := lastInWindow.Load()
						if end.UnixNano() <= last || lastInWindow.CompareAndSwap(last, end.UnixNano()) {
							break
						}
					}
				}
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				l = append(l, lat)
				if !ok {
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
	res.elapsed = d
	if maxCalls > 0 && next.Load() > int64(maxCalls) { // ended by the bound, not the clock
		res.elapsed = time.Unix(0, lastInWindow.Load()).Sub(start)
	}
	res.calls = int(inWindow.Load())
	all := slices.Concat(lats...)
	slices.Sort(all)
	if len(all) > 0 {
		res.p50 = all[len(all)/2]
		res.p99 = all[min(len(all)-1, len(all)*99/100)]
	}
	return res
}

// callTimeout bounds the calls past the window: a service that stops
// answering ends the run with errors rather than hanging it.
const callTimeout = 10 * time.Second

// A caller makes call i of caller c (which picks the connection) and
// says whether the service allowed it.
type caller func(ctx context.Context, c, i int) (ok bool, err error)

// envoyCaller calls envoy.service.ratelimit.v3 ShouldRateLimit with one
// descriptor (alg, k<i mod keys>) in domain "bench". Requests are built
// once per key: the load generator's allocations should not be what is
// measured.
func envoyCaller(conn []*grpc.ClientConn, alg string, keys int) caller {
	clients := make([]rlsv3.RateLimitServiceClient, len(conn))
	for i, cc := range conn {
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	reqs := envoyRequests(alg, keys)
	return func(ctx context.Context, c, i int) (bool, error) {
		resp, err := clients[c%len(clients)].ShouldRateLimit(ctx, reqs[i%keys])
		if err != nil {
			return false, err
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
	}
}

// gubernatorCaller calls gubernator's GetRateLimits with one rate limit
// (name alg, unique key k<i mod keys>): the same limits as
// rlsconf/ratekeeper.yaml, high enough that every call is allowed.
// gubernator has token_bucket and leaky_bucket only.
func gubernatorCaller(conn []*grpc.ClientConn, alg string, keys int) caller {
	clients := make([]gubernator.V1Client, len(conn))
	for i, cc := range conn {
		clients[i] = gubernator.NewV1Client(cc)
	}
	reqs := gubernatorRequests(alg, keys)
	return func(ctx context.Context, c, i int) (bool, error) {
		resp, err := clients[c%len(clients)].GetRateLimits(ctx, reqs[i%keys])
		if err != nil {
			return false, err
		}
		r := resp.GetResponses()
		if len(r) != 1 {
			return false, fmt.Errorf("%d responses to one request", len(r))
		}
		if r[0].GetError() != "" {
			return false, errors.New(r[0].GetError())
		}
		return r[0].GetStatus() == gubernator.Status_UNDER_LIMIT, nil
	}
}

// envoyRequests are the requests of envoyCaller, one per key.
func envoyRequests(alg string, keys int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: alg, Value: "k" + strconv.Itoa(i)}},
		}}}
	}
	return reqs
}

// gubernatorRequests are the requests of gubernatorCaller, one per key.
func gubernatorRequests(alg string, keys int) []*gubernator.GetRateLimitsReq {
	var a gubernator.Algorithm
	switch alg {
	case "token_bucket":
		a = gubernator.Algorithm_TOKEN_BUCKET
	case "leaky_bucket":
		a = gubernator.Algorithm_LEAKY_BUCKET
	default:
		fmt.Fprintf(os.Stderr, "rlsload: gubernator has no %s\n", alg)
		os.Exit(2)
	}
	reqs := make([]*gubernator.GetRateLimitsReq, keys)
	for i := range reqs {
		reqs[i] = &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
			Name: alg, UniqueKey: "k" + strconv.Itoa(i), Hits: 1,
			Limit: 1_000_000, Burst: 1_000_000, Duration: 1000, Algorithm: a, // a million a second
		}}}
	}
	return reqs
}

// marshalAll encodes each message once, as a length-prefixed gRPC
// message.
func marshalAll[M proto.Message](msgs []M) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(1)
		}
		out[i] = grpcMessage(b)
	}
	return out
}

// leanEnvoyCaller is envoyCaller over the lean client: the requests are
// encoded once per key, and the answer counts only with grpc-status 0 and
// an overall_code of OK or OVER_LIMIT.
func leanEnvoyCaller(lc *leanClient, alg string, keys int) caller {
	msgs := marshalAll(envoyRequests(alg, keys))
	return func(ctx context.Context, c, i int) (bool, error) {
		resp, err := lc.call(ctx, c, msgs[i%keys])
		if err != nil {
			return false, err
		}
		code, err := overallCode(resp)
		if err != nil {
			return false, err
		}
		switch rlsv3.RateLimitResponse_Code(code) {
		case rlsv3.RateLimitResponse_OK:
			return true, nil
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			return false, nil
		}
		return false, fmt.Errorf("overall_code %d", code)
	}
}

// leanGubernatorCaller is gubernatorCaller over the lean client.
func leanGubernatorCaller(lc *leanClient, alg string, keys int) caller {
	msgs := marshalAll(gubernatorRequests(alg, keys))
	return func(ctx context.Context, c, i int) (bool, error) {
		resp, err := lc.call(ctx, c, msgs[i%keys])
		if err != nil {
			return false, err
		}
		status, errText, err := gubernatorStatus(resp)
		if err != nil {
			return false, err
		}
		if errText != "" {
			return false, errors.New(errText)
		}
		switch gubernator.Status(status) {
		case gubernator.Status_UNDER_LIMIT:
			return true, nil
		case gubernator.Status_OVER_LIMIT:
			return false, nil
		}
		return false, fmt.Errorf("status %d", status)
	}
}
