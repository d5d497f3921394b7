// Package faults is the fault harness: three `ratekeeper proxy` processes
// and a `ratekeeper serve` on a real Redis topology (standalone, Sentinel,
// Cluster), under a steady open-loop load above the limits, while a fault
// is injected; it records each second and checks what must hold.
//
//	go test ./faults                         # the short run (CI)
//	go test ./faults -run Faults -faults all -out results/faults -timeout 30m
//
// bench/run-faults.sh runs every fault in every mode and draws the charts
// of docs/reliability.md. With FAULTS_LOGS=1 each run also leaves, in -out,
// its processes' and Redis nodes' logs (otherwise kept only for a run that
// failed) and NAME-MODE-slow.txt, every request that took over 20 ms: when
// it left, its kind (0 hot, 1 cold, 2 serve, 3 control), the gateway that answered
// (-1 serve), its latency and status; NAME-MODE-hot.csv, every hot request;
// and NAME-MODE-ticks.csv, each gateway's fallback decisions per scrape
// (writeRaw's columns).
package faults

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	faultsFlag = flag.String("faults", "short", "faults to run: short, all, or a comma-separated list of names")
	modesFlag  = flag.String("modes", "", "store modes for the Redis faults (default: exact,sync,lease with -faults all, else exact,lease)")
	outFlag    = flag.String("out", "", "directory for each run's CSV and chart and the summary (default: a temporary one)")
	margin     = flag.Duration("margin", 250*time.Millisecond, "how much longer than the store timeout (50ms) all but 0.5% of requests may take")
	recoverBy  = flag.Duration("recover", 10*time.Second, "how soon after the topology recovers decisions must come from Redis again")
)

// The phases of a run.
const (
	warmup = 4 * time.Second // before the fault
	after  = 8 * time.Second // after recovery
)

// fault is one kind of failure, injected into a running fleet.
type fault struct {
	name     string
	topology string // standalone, sentinel or cluster
	gateway  bool   // a fault of the gateways, not of Redis
	// losesState: counters may be lost (a restart without persistence,
	// a failover that drops writes not yet replicated), so a limit may
	// admit one more burst.
	losesState bool
	// unbounded: the fault loses counters without any error, as often as
	// it likes (eviction), so nothing bounds the over-admission; the run
	// measures it and does not check it.
	unbounded bool
	// inject does the fault; it calls r.mark("recovered") once the
	// topology serves again.
	inject func(r *run)
}

var allFaults = []fault{
	{name: "redis-restart", topology: "standalone", losesState: true, inject: func(r *run) {
		n := r.top.nodes[0]
		r.mark("killed")
		n.kill()
		time.Sleep(2 * time.Second) // the outage
		n.restart()
		r.mark("recovered")
	}},
	{name: "maxmemory-noeviction", topology: "standalone", inject: func(r *run) {
		addr := r.top.nodes[0].addr()
		mustDo(r.t, addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
		mustDo(r.t, addr, "CONFIG", "SET", "maxmemory", "1")
		r.mark("full")
		time.Sleep(3 * time.Second) // writes refused: OOM
		mustDo(r.t, addr, "CONFIG", "SET", "maxmemory", "0")
		r.mark("recovered")
	}},
	{name: "maxmemory-evict", topology: "standalone", unbounded: true, inject: func(r *run) {
		addr := r.top.nodes[0].addr()
		mustDo(r.t, addr, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
		info := fmt.Sprint(mustDo(r.t, addr, "INFO", "memory"))
		var used int64
		for _, line := range strings.Split(info, "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				fmt.Sscan(s, &used)
			}
		}
		mustDo(r.t, addr, "CONFIG", "SET", "maxmemory", used+512<<10)
		r.mark("full")
		// Another application fills the memory: every write evicts.
		junk := strings.Repeat("x", 4096)
		for i := 0; time.Since(r.start) < r.at("full")+3*time.Second; i++ {
			do(addr, "SET", fmt.Sprintf("junk:%d", i), junk)
		}
		mustDo(r.t, addr, "CONFIG", "SET", "maxmemory", "0")
		r.mark("recovered")
	}},
	{name: "sentinel-kill-primary", topology: "sentinel", losesState: true, inject: func(r *run) {
		old := r.top.masterAddr()
		n := r.top.nodeAt(old)
		r.mark("killed")
		n.kill()
		var now string
		waitFor(r.t, 30*time.Second, "a new primary", func() bool { now = r.top.masterAddr(); return now != "" && now != old })
		r.mark("recovered")
		// Back, empty, as a replica of the new primary. Started as the
		// primary it was, it stayed one until the sentinels turned it
		// into a replica, and in about one run in three meanwhile a
		// sentinel that had just switched saw the new primary down for
		// the 1 s of down-after-milliseconds, and they promoted the empty
		// one: every counter started again (docs/reliability.md).
		n.restartAsReplicaOf(now)
	}},
	{name: "sentinel-failover", topology: "sentinel", losesState: true, inject: func(r *run) {
		old := r.top.masterAddr()
		r.mark("failover")
		mustDo(r.t, r.top.sentinels[0].addr(), "SENTINEL", "FAILOVER", "faults")
		waitFor(r.t, 30*time.Second, "a new primary", func() bool { a := r.top.masterAddr(); return a != "" && a != old })
		r.mark("recovered")
		waitFor(r.t, 30*time.Second, "every sentinel on the new primary", func() bool { return r.top.agree(old) })
		var err error
		if r.split, err = r.top.split(); err != nil {
			r.t.Error(err)
		}
	}},
	{name: "cluster-kill-primary", topology: "cluster", losesState: true, inject: killHotPrimary},
	// The same on a Cluster left at cluster-require-full-coverage yes (the
	// default): from the primary's failure until its replica's election
	// every node answers CLUSTERDOWN, and every key falls back, not only
	// the dead primary's.
	{name: "cluster-kill-primary-full-coverage", topology: "cluster-full-coverage", losesState: true, inject: killHotPrimary},
	{name: "cluster-migrate-hot-slot", topology: "cluster", inject: func(r *run) {
		slot := r.top.hotSlot(r.t, "hot")
		r.mark("migrating")
		r.top.migrate(r.t, slot)
		r.mark("recovered")
	}},
	{name: "gateway-restart", topology: "standalone", gateway: true, inject: func(r *run) {
		p := r.fleet.proxies[0]
		r.mark("killed")
		p.signal(syscall.SIGKILL)
		r.load.drain(p, true) // its health check fails
		time.Sleep(2 * time.Second)
		p.start()
		r.load.drain(p, false)
		r.mark("recovered")
	}},
	{name: "reload-all", topology: "standalone", gateway: true, inject: func(r *run) {
		for _, p := range r.fleet.proxies {
			r.fleet.writeConfig(p, coldRate+5)
		}
		r.mark("reload")
		var wg sync.WaitGroup
		for _, p := range r.fleet.proxies {
			wg.Go(func() { p.signal(syscall.SIGHUP) })
		}
		wg.Wait()
		r.mark("recovered")
	}},
}

// killHotPrimary kills the Cluster primary that holds the hot key's slot,
// and waits for its replica's promotion.
func killHotPrimary(r *run) {
	slot := r.top.hotSlot(r.t, "hot")
	owner := r.top.ownerOf(slot)
	n := r.top.nodeAt(owner.addr)
	r.t.Logf("killing %s, the primary of the hot key's slot %d", owner.addr, slot)
	r.mark("killed")
	n.kill()
	waitFor(r.t, 30*time.Second, "a replica promoted", func() bool {
		o := r.top.ownerOf(slot)
		return o.addr != "" && o.addr != owner.addr && r.top.clusterOK()
	})
	r.mark("recovered")
}

// shortFaults run in CI: a Redis outage and a Cluster failover in the two
// modes that must never over-admit, and a gateway restart in lease mode.
var shortFaults = []string{"redis-restart", "cluster-kill-primary", "gateway-restart"}

func TestFaults(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed, and CI=true requires it", bin)
			}
			t.Skipf("%s is not installed", bin)
		}
	}
	out := *outFlag
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var chosen []fault
	for _, f := range allFaults {
		switch {
		case *faultsFlag == "all",
			*faultsFlag == "short" && slices.Contains(shortFaults, f.name),
			slices.Contains(strings.Split(*faultsFlag, ","), f.name):
			chosen = append(chosen, f)
		}
	}
	modes := strings.Split(*modesFlag, ",")
	if *modesFlag == "" {
		modes = []string{"exact", "lease"}
		if *faultsFlag == "all" {
			modes = []string{"exact", "sync", "lease"}
		}
	}
	var results []result
	for _, f := range chosen {
		ms := modes
		switch {
		case f.gateway && *faultsFlag == "short":
			ms = []string{"lease"} // the mode whose gateway holds quota
		}
		for _, mode := range ms {
			t.Run(f.name+"/"+mode, func(t *testing.T) {
				res := runFault(t, f, mode, out)
				results = append(results, res)
			})
		}
	}
	if err := writeSummary(filepath.Join(out, "summary.md"), results); err != nil {
		t.Error(err)
	}
	t.Logf("results in %s", out)
}

// run is one fault in one mode.
type run struct {
	t     testing.TB
	fault fault
	mode  string
	top   *topology
	fleet *fleet
	load  *load
	start time.Time
	// byGateway is each gateway's fallback decisions per scrape, and
	// scrapes when each scrape began and ended (the scraper's), once the
	// run is over.
	byGateway [][]float64
	scrapes   [][2]time.Duration
	// split is how long two primaries admitted (sentinel-failover).
	split time.Duration

	mu    sync.Mutex
	marks []mark
}

type mark struct {
	name string
	at   time.Duration
}

func (r *run) mark(name string) {
	r.mu.Lock()
	r.marks = append(r.marks, mark{name, time.Since(r.start)})
	r.mu.Unlock()
}

func (r *run) at(name string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.marks {
		if m.name == name {
			return m.at
		}
	}
	return -1
}

func runFault(t *testing.T, f fault, mode, out string) result {
	var top *topology
	switch f.topology {
	case "sentinel":
		top = newSentinel(t)
	case "cluster":
		top = newCluster(t, false)
	case "cluster-full-coverage":
		top = newCluster(t, true)
	default:
		top = newStandalone(t)
	}
	fl := newFleet(t, top.url, mode)
	r := &run{t: t, fault: f, mode: mode, top: top, fleet: fl, start: time.Now()}
	r.load = startLoad(fl, r.start)
	sc := startScraper(fl, r.start)

	time.Sleep(warmup - 500*time.Millisecond) // the steady state the fault interrupts
	base := snapshot(fl, top)
	time.Sleep(500 * time.Millisecond)
	f.inject(r)
	time.Sleep(after)
	samples := r.load.finish()
	seconds := sc.finish()
	r.byGateway, r.scrapes = sc.byGateway, sc.times
	leaks := checkLeaks(t, fl, top, base)

	res := analyse(r, samples, seconds)
	res.leaks = leaks
	name := f.name + "-" + mode
	keepLogs := os.Getenv("FAULTS_LOGS") == "1"
	if keepLogs {
		var slow []string
		for _, x := range samples {
			if x.lat > 20*time.Millisecond {
				slow = append(slow, fmt.Sprintf("%v kind=%d gw=%d lat=%v status=%d", x.at, x.kind, x.gateway, x.lat, x.status))
			}
		}
		if err := os.WriteFile(filepath.Join(out, name+"-slow.txt"), []byte(strings.Join(slow, "\n")), 0o644); err != nil {
			t.Error(err)
		}
		if err := writeRaw(filepath.Join(out, name), samples, r); err != nil {
			t.Error(err)
		}
	}
	if err := writeCSV(filepath.Join(out, name+".csv"), res.rows); err != nil {
		t.Error(err)
	}
	if err := drawRun(filepath.Join(out, name+".png"), r, res); err != nil {
		t.Error(err)
	}
	res.check(t)
	if t.Failed() || keepLogs {
		for _, p := range fl.all() {
			if b, err := os.ReadFile(p.logPath); err == nil {
				os.WriteFile(filepath.Join(out, name+"-"+p.name+".log"), b, 0o644)
			}
		}
		for i, n := range append(append([]*node{}, top.nodes...), top.sentinels...) {
			if b, err := os.ReadFile(filepath.Join(n.dir, "redis.log")); err == nil {
				os.WriteFile(filepath.Join(out, fmt.Sprintf("%s-redis-%d-%d.log", name, i, n.port)), b, 0o644)
			}
		}
	}
	return res
}

// scrapeEvery is how often the scraper reads the fleet's metrics: fine
// enough to time a recovery to a tenth of a second.
const scrapeEvery = 100 * time.Millisecond

// scraper reads the fleet's store errors and fallback decisions every
// scrapeEvery, as deltas (a restarted process starts again from zero).
type scraper struct {
	f     *fleet
	start time.Time
	stop  chan struct{}
	done  chan struct{}
	// per scrapeEvery since start: store errors and fallback decisions
	errs, fallbacks []float64
	// per scrapeEvery since start, each gateway's own fallback decisions
	// (by its index in the fleet's proxies): when each came back to Redis
	byGateway [][]float64
	// when each scrape began and ended, since start: a busy machine
	// delays scrapes, and the ticker drops the ticks it missed
	times [][2]time.Duration
}

func startScraper(f *fleet, start time.Time) *scraper {
	s := &scraper{f: f, start: start, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *scraper) run() {
	defer close(s.done)
	last := map[*proc][2]float64{}
	tk := time.NewTicker(scrapeEvery)
	defer tk.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tk.C:
		}
		var de, df float64
		began := time.Since(s.start)
		gw := make([]float64, len(s.f.proxies))
		for _, p := range s.f.all() {
			if !p.alive() {
				continue
			}
			m := p.metrics("ratekeeper_store_fallback_errors_total", "ratekeeper_store_fallback_decisions_total")
			e, d := m["ratekeeper_store_fallback_errors_total"], m["ratekeeper_store_fallback_decisions_total"]
			if e < 0 {
				continue // not answering this second
			}
			prev := last[p]
			if e < prev[0] || d < prev[1] {
				prev = [2]float64{} // restarted
			}
			de += e - prev[0]
			df += d - prev[1]
			if i := slices.Index(s.f.proxies, p); i >= 0 {
				gw[i] = d - prev[1]
			}
			last[p] = [2]float64{e, d}
		}
		s.errs = append(s.errs, de)
		s.fallbacks = append(s.fallbacks, df)
		s.byGateway = append(s.byGateway, gw)
		s.times = append(s.times, [2]time.Duration{began, time.Since(s.start)})
	}
}

func (s *scraper) finish() [][2]float64 {
	close(s.stop)
	<-s.done
	out := make([][2]float64, len(s.errs))
	for i := range s.errs {
		out[i] = [2]float64{s.errs[i], s.fallbacks[i]}
	}
	return out
}

// base is the fleet's resources in the steady state.
type base struct {
	goroutines, fds map[*proc]float64
	clients         int
}

func snapshot(f *fleet, top *topology) base {
	b := base{goroutines: map[*proc]float64{}, fds: map[*proc]float64{}, clients: top.clients()}
	for _, p := range f.all() {
		b.goroutines[p], b.fds[p] = p.resources()
	}
	return b
}

// checkLeaks waits, up to a deadline, for every process that ran through
// the fault to hold no more goroutines and files than before it (plus a
// slack for connections the load left idle), and says what it saw.
func checkLeaks(t testing.TB, f *fleet, top *topology, b base) string {
	const slack = 30
	var report []string
	for _, p := range f.all() {
		g0, fd0 := b.goroutines[p], b.fds[p]
		var g, fd float64
		deadline := time.Now().Add(10 * time.Second)
		for {
			g, fd = p.resources()
			if g <= g0+slack && fd <= fd0+slack || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // polling, bounded above
		}
		report = append(report, fmt.Sprintf("%s goroutines %.0f→%.0f fds %.0f→%.0f", p.name, g0, g, fd0, fd))
		if g > g0+slack || fd > fd0+slack {
			t.Errorf("leak in %s: goroutines %.0f → %.0f, open files %.0f → %.0f", p.name, g0, g, fd0, fd)
		}
	}
	c := top.clients()
	report = append(report, fmt.Sprintf("redis clients %d→%d", b.clients, c))
	if c > b.clients+slack {
		t.Errorf("Redis connections grew from %d to %d", b.clients, c)
	}
	return strings.Join(report, "; ")
}

// writeRaw writes, for analysis, every hot request (sent, latency in µs,
// gateway, status, X-RateLimit-Limit, answered) and each gateway's
// fallback decisions per scrape, with when the scrape began and ended.
func writeRaw(prefix string, samples []sample, r *run) error {
	var b strings.Builder
	for _, x := range samples {
		if x.kind == kindHot {
			fmt.Fprintf(&b, "%d,%d,%d,%d,%d,%d\n", x.at.Microseconds(), x.lat.Microseconds(), x.gateway, x.status, x.limit, x.done.Microseconds())
		}
	}
	if err := os.WriteFile(prefix+"-hot.csv", []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	for _, m := range r.marks {
		fmt.Fprintf(&b, "#%s,%d\n", m.name, m.at.Microseconds())
	}
	for i, tick := range r.byGateway {
		fmt.Fprintln(&b, strings.Trim(fmt.Sprint(tick), "[]"), r.scrapes[i][0].Microseconds(), r.scrapes[i][1].Microseconds())
	}
	return os.WriteFile(prefix+"-ticks.csv", []byte(b.String()), 0o644)
}
