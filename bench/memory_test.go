package bench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// Sub-benchmarks are named key=value so that benchstat can put the
// contenders side by side: benchstat -col /lib (see run-memory.sh).

// memHotLimit is the one-key and per-algorithm limit: 1000 per millisecond
// (a million per second), burst 1000. A benchmark loop asks faster than
// that, so it measures a realistic mix of allowed and refused decisions;
// x/time/rate gets the same limit.
var memHotLimit = ratekeeper.Limit{Rate: 1000, Period: time.Millisecond, Burst: 1000}

func memLimiter(b *testing.B, s ratekeeper.Store, l ratekeeper.Limit) *ratekeeper.Limiter {
	b.Helper()
	lim, err := ratekeeper.New(s, l)
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// memSink keeps results alive so the compiler cannot drop a decision.
var memSink atomic.Int64

// BenchmarkMemoryOneKey: one key, serial and parallel, ratekeeper's token
// bucket (memory store, system clock) against x/time/rate's Limiter, which
// has no key to look up.
func BenchmarkMemoryOneKey(b *testing.B) {
	l := memHotLimit
	l.Algorithm = ratekeeper.TokenBucket
	for _, mode := range []string{"serial", "parallel"} {
		b.Run("mode="+mode+"/lib=ratekeeper", func(b *testing.B) {
			s := memstore.New()
			defer s.Close()
			lim := memLimiter(b, s, l)
			const key = "ip:10.0.0.1"
			memRun(b, mode, func(*rand.Rand) bool {
				d, err := lim.Allow(memCtx, key)
				return err == nil && d.Allowed
			})
		})
		b.Run("mode="+mode+"/lib=x_time_rate", func(b *testing.B) {
			lim := rate.NewLimiter(rate.Limit(float64(l.Rate)/l.Period.Seconds()), l.Burst)
			memRun(b, mode, func(*rand.Rand) bool { return lim.Allow() })
		})
	}
}

// memRun runs op b.N times, serially or with b.RunParallel, reporting
// allocations and, besides the wall time per op, the CPU time per op
// (cpu-ns/op): the benchmark thread's CPU time when serial, the whole
// process's when parallel. On a machine shared with other work, wall time
// includes the time the benchmark was descheduled; CPU time does not, so it
// is the steadier measure of cost, and wall time the measure of throughput.
// Each goroutine has its own random source for ops that pick keys.
func memRun(b *testing.B, mode string, op func(*rand.Rand) bool) {
	b.ReportAllocs()
	var seq atomic.Uint64
	if mode == "serial" {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r := rand.New(rand.NewPCG(seq.Add(1), 7))
		n := 0
		c0 := memCPU(unix.CLOCK_THREAD_CPUTIME_ID)
		b.ResetTimer()
		for range b.N {
			if op(r) {
				n++
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(memCPU(unix.CLOCK_THREAD_CPUTIME_ID)-c0)/float64(b.N), "cpu-ns/op")
		memSink.Add(int64(n))
		return
	}
	c0 := memCPU(unix.CLOCK_PROCESS_CPUTIME_ID)
	w0 := memMutexWait()
	defer func() {
		b.ReportMetric(float64(memCPU(unix.CLOCK_PROCESS_CPUTIME_ID)-c0)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(memMutexWait()-w0)/float64(b.N), "lockwait-ns/op")
	}()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(seq.Add(1), 7))
		n := 0
		for pb.Next() {
			if op(r) {
				n++
			}
		}
		memSink.Add(int64(n))
	})
}

// memMutexWait is how long goroutines have spent blocked on locks so far,
// in ns: in parallel benchmarks, lockwait-ns/op shows how much the
// goroutines made each other wait, whatever else the machine was doing.
func memMutexWait() int64 {
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return int64(s[0].Value.Float64() * 1e9)
}

// memCPU reads a CPU-time clock, in ns.
func memCPU(clock int32) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// BenchmarkMemoryManyKeys: a million distinct keys drawn at random by
// parallel goroutines, against the same limit in every contender. Every key
// is inserted before the clock starts, so the benchmark measures decisions
// on existing keys spread over a large working set (cache misses included).
//
// Keys are inserted as copies, and asked for with the original strings: as
// in a server, where every request brings a fresh string, a contender that
// keeps the caller's string as its map key (the peers do; ratekeeper keeps
// its own copy) cannot find it by pointer equality, and must read the key
// it stored.
func BenchmarkMemoryManyKeys(b *testing.B) {
	keys := memKeys()
	for _, name := range memPeerNames {
		var p *memPeer // built on the first run only (b.Run calls back once per b.N tried)
		b.Run("lib="+name, func(b *testing.B) {
			if p == nil {
				np := newMemPeer(b, name)
				for _, k := range keys {
					np.allow(strings.Clone(k))
				}
				p = &np
			}
			memRun(b, "parallel", func(r *rand.Rand) bool {
				return p.allow(keys[r.IntN(len(keys))])
			})
		})
		if p != nil {
			p.close()
		}
	}
}

// memHeapLimits is, per algorithm, a limit whose state stays live for the
// whole measurement (nothing goes idle and gets swept).
func memHeapLimit(a ratekeeper.Algorithm) ratekeeper.Limit {
	return ratekeeper.Limit{Algorithm: a, Rate: 100, Period: time.Hour}
}

// BenchmarkMemoryHeap: heap bytes per key (B/key) with a million keys, one
// request each, for each algorithm in the memory store and, for context,
// for the peers (map_mutex, sethvargo: token buckets; ulule: fixed
// windows). Each key is a fresh copy made inside the measurement, so that
// the key's bytes count for every contender, whether it keeps the caller's
// string (the peers) or its own copy (ratekeeper). The timed loop is one
// serial decision on a random existing key of that million.
func BenchmarkMemoryHeap(b *testing.B) {
	keys := memKeys()
	for _, a := range ratekeeper.Algorithms {
		b.Run("algo="+string(a)+"/lib=ratekeeper", func(b *testing.B) {
			var lim *ratekeeper.Limiter
			perKey, done := memHeapPerKey(func() func() {
				s := memstore.New(memstore.WithMaxKeys(4 * memManyKeys))
				lim = memLimiter(b, s, memHeapLimit(a))
				for _, k := range keys {
					if _, err := lim.Allow(memCtx, strings.Clone(k)); err != nil {
						b.Fatal(err)
					}
				}
				return func() { runtime.KeepAlive(s); s.Close() }
			})
			defer done()
			b.ReportAllocs()
			r := rand.New(rand.NewPCG(1, 7))
			for b.Loop() {
				d, _ := lim.Allow(memCtx, keys[r.IntN(len(keys))])
				memSink.Add(int64(d.Remaining))
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
	peerAlgo := map[string]ratekeeper.Algorithm{
		"map_mutex": ratekeeper.TokenBucket,
		"sethvargo": ratekeeper.TokenBucket,
		"ulule":     ratekeeper.FixedWindow,
	}
	for _, name := range memPeerNames[1:] {
		b.Run("algo="+string(peerAlgo[name])+"/lib="+name, func(b *testing.B) {
			var p memPeer
			perKey, done := memHeapPerKey(func() func() {
				p = newMemPeer(b, name)
				for _, k := range keys {
					p.allow(strings.Clone(k))
				}
				return p.close
			})
			defer done()
			b.ReportAllocs()
			r := rand.New(rand.NewPCG(1, 7))
			for b.Loop() {
				p.allow(keys[r.IntN(len(keys))])
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

// memHeapPerKey measures the live heap that fill adds, per key, after a
// full collection before and after. fill returns the cleanup to run once the
// caller is done with what it built; memHeapPerKey passes it on.
func memHeapPerKey(fill func() func()) (perKey float64, done func()) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done = fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / memManyKeys, done
}

// BenchmarkMemoryAlgorithms: every algorithm's decision on an existing key:
// Allow for all five, Reserve for the two buckets (the windows' Reserve is
// their Allow). Serial on one key, and parallel over 1024 keys so that the
// goroutines meet on shards, not on one key.
func BenchmarkMemoryAlgorithms(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	for _, a := range ratekeeper.Algorithms {
		ops := []string{"Allow"}
		if a == ratekeeper.TokenBucket || a == ratekeeper.LeakyBucket {
			ops = append(ops, "Reserve")
		}
		for _, op := range ops {
			for _, mode := range []string{"serial", "parallel"} {
				b.Run(fmt.Sprintf("algo=%s/op=%s/mode=%s", a, op, mode), func(b *testing.B) {
					s := memstore.New()
					defer s.Close()
					l := memHotLimit
					l.Algorithm = a
					lim := memLimiter(b, s, l)
					for _, k := range keys {
						if _, err := lim.Allow(memCtx, k); err != nil {
							b.Fatal(err)
						}
					}
					call := lim.Allow
					if op == "Reserve" {
						call = lim.Reserve
					}
					memRun(b, mode, func(r *rand.Rand) bool {
						k := keys[0]
						if mode == "parallel" {
							k = keys[r.IntN(len(keys))]
						}
						d, err := call(memCtx, k)
						return err == nil && d.Allowed
					})
				})
			}
		}
	}
}
