package faults

import (
	"math"
	"testing"
	"time"
)

const ms = time.Millisecond

// A request counts in an interval only when it was sent and answered
// within it: a busy machine that keeps a burst in flight does not make it
// look as if decided at once.
func TestOverAdmissionCountsRequestsDecidedWithin(t *testing.T) {
	var admitted []flight
	for range 130 { // sent at 0, decided by 200 ms: 120 promised then
		admitted = append(admitted, flight{0, 200 * ms})
	}
	over, from, to := overAdmission(admitted)
	if over != 10 || from != 0 || to != 200*ms {
		t.Errorf("130 admitted in 200 ms: over %v from %v to %v, want 10 from 0 to 200ms", over, from, to)
	}
	for i := range 100 { // then the rate for a second: nothing more
		at := 200*ms + time.Duration(i+1)*10*ms
		admitted = append(admitted, flight{at, at})
	}
	if over, _, _ := overAdmission(admitted); over != 10 {
		t.Errorf("then the rate: over %v, want 10", over)
	}
}

// scrapedRun is a run whose scrapes began every 100 ms and took 1 ms;
// fell[g] lists, by scrape, gateway g's fallback decisions.
func scrapedRun(n int, fell map[int]map[int]float64) *run {
	r := &run{}
	for i := range n {
		tick := make([]float64, gateways)
		for g, at := range fell {
			tick[g] = at[i]
		}
		r.byGateway = append(r.byGateway, tick)
		r.scrapes = append(r.scrapes, [2]time.Duration{time.Duration(i) * 100 * ms, time.Duration(i)*100*ms + ms})
	}
	return r
}

func TestLocalShares(t *testing.T) {
	outage := map[int]float64{}
	for i := 10; i < 30; i++ {
		outage[i] = 15
	}
	share := func(d time.Duration) float64 { return (hotBurst + hotRate*d.Seconds()) / gateways }
	for _, c := range []struct {
		name string
		fell map[int]map[int]float64
		want float64
		runs int
	}{
		{"one timeout admits at most its decision", map[int]map[int]float64{0: {40: 1}}, 1, 1},
		{"an outage: the share's burst and rate", map[int]map[int]float64{1: outage}, share(2001 * ms), 1},
		{"runs 300 ms apart: one bucket", map[int]map[int]float64{2: {10: 30, 11: 30, 15: 30, 16: 30}}, share(701 * ms), 2},
		{"runs 2 s apart: two buckets", map[int]map[int]float64{2: {10: 30, 11: 30, 40: 30, 41: 30}}, 2 * share(201*ms), 2},
		{"every gateway", map[int]map[int]float64{0: {40: 1}, 1: outage, 2: {10: 30, 11: 30, 40: 30, 41: 30}}, 1 + share(2001*ms) + 2*share(201*ms), 4},
	} {
		local, runs := localShares(scrapedRun(60, c.fell))
		if math.Abs(local-c.want) > 1e-9 || runs != c.runs {
			t.Errorf("%s: %v in %d runs, want %v in %d", c.name, local, runs, c.want, c.runs)
		}
	}
}

func TestRedisGaps(t *testing.T) {
	var hot []sample
	add := func(from, to time.Duration, limit int16) {
		for at := from; at < to; at += 10 * ms {
			hot = append(hot, sample{at: at, done: at + 5*ms, status: 200, limit: limit})
		}
	}
	add(0, time.Second, hotBurst)
	add(time.Second+500*ms, 2*time.Second, hotBurst) // 505 ms: too short
	add(2*time.Second, 4*time.Second, hotBurst/gateways)
	add(4*time.Second, 5*time.Second, hotBurst) // 2,005 ms without Redis
	hot = append(hot, sample{at: 5 * time.Second, done: 7 * time.Second, status: 429, limit: hotBurst})
	add(7*time.Second+200*ms, 8*time.Second, hotBurst) // in flight till 7 s: 205 ms
	got := redisGaps(hot)
	if len(got) != 1 || got[0] != 2005*ms {
		t.Errorf("gaps %v, want [2.005s]", got)
	}
}

func TestLastLogged(t *testing.T) {
	logs := [][]byte{
		[]byte("6479:S 28 Nov 2026 11:03:47.986 * Connecting to MASTER 127.0.0.1:41559\n" +
			"6479:M 28 Nov 2026 11:04:02.664 * MASTER MODE enabled (user request)\n"),
		[]byte("6486:X 28 Nov 2026 11:04:03.698 # +switch-master faults 127.0.0.1 41559 127.0.0.1 46065\n"),
		[]byte("6491:X 28 Nov 2026 11:04:03.710 # +switch-master faults 127.0.0.1 41559 127.0.0.1 46065\n"),
	}
	promoted, err := lastLogged(logs[:1], "MASTER MODE enabled")
	if err != nil {
		t.Fatal(err)
	}
	switched, err := lastLogged(logs[1:], "+switch-master")
	if err != nil {
		t.Fatal(err)
	}
	if d := switched.Sub(promoted); d != 1046*ms {
		t.Errorf("split %v, want 1.046s", d)
	}
	if _, err := lastLogged(logs[1:], "MASTER MODE enabled"); err == nil {
		t.Error("no promotion logged: no error")
	}
}

// A request is judged by what it took beyond the controls in flight with
// it: a stalled machine delays both, a call past its deadline only it.
func TestControlsDelay(t *testing.T) {
	c := controlsOf([]sample{
		{at: 0, done: 20 * ms, lat: 20 * ms, kind: kindControl},
		{at: 100 * ms, done: 1100 * ms, lat: time.Second, kind: kindControl}, // a stall
		{at: 2000 * ms, done: 2010 * ms, lat: 10 * ms, kind: kindControl},
		{at: 500 * ms, done: 600 * ms, lat: 100 * ms, kind: kindHot},
	})
	for _, x := range []struct {
		s    sample
		want time.Duration
	}{
		{sample{at: 0, done: 1200 * ms}, time.Second},
		{sample{at: 1050 * ms, done: 1300 * ms}, time.Second},
		{sample{at: 1150 * ms, done: 1900 * ms}, 0},
		{sample{at: 1900 * ms, done: 2005 * ms}, 10 * ms},
	} {
		if got := c.delay(x.s); got != x.want {
			t.Errorf("%v to %v: delay %v, want %v", x.s.at, x.s.done, got, x.want)
		}
	}
	if len(c) != 3 {
		t.Errorf("%d controls, want 3", len(c))
	}
}
