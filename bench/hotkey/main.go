// Command hotkey measures the shared modes on one hot global key. Several
// OS processes, each with many callers, take from one key of one Redis
// server as fast as they can. It reports decisions per second, the latency
// percentiles, and Redis commands and Redis CPU per decision. It also
// reports how far the admissions went past (sync) or fell short of (lease)
// the limit in each window. The script bench/run-hotkey.sh runs it for every
// mode and sync period.
//
//	hotkey -redis URL -mode lease -period 100ms [-processes 3 -callers 64 -duration 5s]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

type job struct {
	URL       string
	Mode      string
	Period    time.Duration
	Limit     ratekeeper.Limit
	Key       string
	Keys      int // > 1: each decision picks one of this many keys
	Callers   int
	Start     time.Time
	Duration  time.Duration
	Processes int
}

type report struct {
	Decisions int64
	Admitted  map[int64]int64 // per window end (µs): admitted
	Demand    map[int64]int64 // per window end: asked
	Latencies []int64         // a sample, ns
	Errors    int64
	Shared    redisstore.SharedStats
}

func main() {
	var (
		url       = flag.String("redis", "redis://127.0.0.1:6379/0", "Redis `URL`")
		mode      = flag.String("mode", "exact", "exact, sync or lease")
		period    = flag.Duration("period", 100*time.Millisecond, "sync period")
		processes = flag.Int("processes", 3, "OS processes")
		callers   = flag.Int("callers", 64, "callers per process")
		duration  = flag.Duration("duration", 5*time.Second, "how long to measure")
		rate      = flag.Int("rate", 1_000_000, "the limit per window")
		window    = flag.Duration("window", time.Second, "the fixed window")
		keys      = flag.Int("keys", 1, "how many keys the decisions spread over (1: one hot key)")
		worker    = flag.String("worker", "", "internal: run one process of this job (JSON)")
	)
	flag.Parse()
	if *worker != "" {
		runWorker(*worker)
		return
	}
	j := job{URL: *url, Mode: *mode, Period: *period, Callers: *callers, Duration: *duration, Processes: *processes, Keys: *keys,
		Limit: ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: *rate, Period: *window},
		Key:   fmt.Sprintf("hotkey:%d", time.Now().UnixNano()), Start: time.Now().Add(time.Second)}
	opt, err := redis.ParseURL(j.URL)
	if err != nil {
		log.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	ctx := context.Background()
	spec, _ := json.Marshal(j)
	var outs []*bytes.Buffer
	var cmds []*exec.Cmd
	for range j.Processes {
		c := exec.Command(os.Args[0], "-worker", string(spec))
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, os.Stderr
		if err := c.Start(); err != nil {
			log.Fatal(err)
		}
		cmds, outs = append(cmds, c), append(outs, &out)
	}
	time.Sleep(time.Until(j.Start))
	cmds0, cpu0 := redisCounters(ctx, rc)
	time.Sleep(j.Duration)
	cmds1, cpu1 := redisCounters(ctx, rc)
	var total report
	total.Admitted, total.Demand = map[int64]int64{}, map[int64]int64{}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			log.Fatalf("worker: %v", err)
		}
		var r report
		if err := json.Unmarshal(outs[i].Bytes(), &r); err != nil {
			log.Fatalf("worker report: %v", err)
		}
		total.Decisions += r.Decisions
		total.Errors += r.Errors
		total.Latencies = append(total.Latencies, r.Latencies...)
		for w, n := range r.Admitted {
			total.Admitted[w] += n
		}
		for w, n := range r.Demand {
			total.Demand[w] += n
		}
		total.Shared.Syncs += r.Shared.Syncs
		total.Shared.Leases += r.Shared.Leases
		total.Shared.GiveBacks += r.Shared.GiveBacks
		total.Shared.DenialHits += r.Shared.DenialHits
	}
	slices.Sort(total.Latencies)
	pct := func(p float64) time.Duration {
		if len(total.Latencies) == 0 {
			return 0
		}
		return time.Duration(total.Latencies[int(p*float64(len(total.Latencies)-1))]).Round(100 * time.Nanosecond)
	}
	secs := j.Duration.Seconds()
	// Windows wholly inside the measurement, where demand passed the limit.
	var over, under int64
	ws := 0
	for w, asked := range total.Demand {
		if j.Keys > 1 {
			break // a limit per key: the windows' totals say nothing
		}
		start := time.UnixMicro(w).Add(-j.Limit.Period)
		if start.Before(j.Start) || time.UnixMicro(w).After(j.Start.Add(j.Duration)) || asked <= int64(j.Limit.Rate) {
			continue
		}
		ws++
		got := total.Admitted[w]
		over = max(over, got-int64(j.Limit.Rate))
		under = max(under, int64(j.Limit.Rate)-got)
	}
	name := j.Mode
	if name != "exact" {
		name += "/" + j.Period.String()
	}
	calls := float64(total.Shared.Syncs+total.Shared.Leases+total.Shared.GiveBacks) / secs
	if j.Mode == "exact" {
		calls = float64(total.Decisions-int64(total.Shared.DenialHits)) / secs
	}
	fmt.Printf("%-22s %9.0f decisions/s  p50 %-8v p99 %-9v  %7.0f store calls/s  redis %8.0f cmds/s  %7.4f µs redis CPU/decision  limit %d/%v: windows %d, most over %d, most under %d, errors %d\n",
		name, float64(total.Decisions)/secs, pct(0.5), pct(0.99), calls,
		(cmds1-cmds0)/secs, (cpu1-cpu0)*1e6/float64(total.Decisions),
		j.Limit.Rate, j.Limit.Period, ws, max(0, over), max(0, under), total.Errors)
}

// redisCounters reads the server's commands processed and CPU seconds.
func redisCounters(ctx context.Context, rc *redis.Client) (cmds, cpu float64) {
	info, err := rc.Info(ctx, "stats", "cpu").Result()
	if err != nil {
		log.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "total_commands_processed":
			cmds = f
		case "used_cpu_sys", "used_cpu_user":
			cpu += f
		}
	}
	return cmds, cpu
}

func runWorker(spec string) {
	var j job
	if err := json.Unmarshal([]byte(spec), &j); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	s, err := redisstore.Open(ctx, j.URL, redisstore.WithMode(redisstore.Mode(j.Mode), j.Period))
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(time.Until(j.Start))
	end := j.Start.Add(j.Duration)
	var (
		mu sync.Mutex
		r  = report{Admitted: map[int64]int64{}, Demand: map[int64]int64{}}
		wg sync.WaitGroup
	)
	win := j.Limit.Period.Microseconds()
	for range j.Callers {
		wg.Go(func() {
			admitted, demand := map[int64]int64{}, map[int64]int64{}
			var n, errs int64
			var lat []int64
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
			names := []string{j.Key}
			if j.Keys > 1 {
				names = make([]string, j.Keys)
				for i := range names {
					names[i] = j.Key + ":" + strconv.Itoa(i)
				}
			}
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				d, err := s.Take(ctx, ratekeeper.Request{Key: names[rng.IntN(len(names))], Limit: j.Limit, N: 1})
				el := time.Since(t0)
				n++
				if n%64 == 0 {
					lat = append(lat, el.Nanoseconds())
				}
				if err != nil {
					errs++
					continue
				}
				w := (d.At.UnixMicro()/win + 1) * win
				demand[w]++
				if d.Allowed {
					admitted[w]++
				}
			}
			mu.Lock()
			r.Decisions += n
			r.Errors += errs
			r.Latencies = append(r.Latencies, lat...)
			for w, c := range admitted {
				r.Admitted[w] += c
			}
			for w, c := range demand {
				r.Demand[w] += c
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	s.Close()
	r.Shared = s.SharedStats()
	json.NewEncoder(os.Stdout).Encode(r)
}
