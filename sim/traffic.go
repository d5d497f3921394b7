package sim

import (
	"math"
	"math/rand/v2"
	"time"
)

// judge is the exact sliding window log that traffic decisions are judged
// against. It keeps the instants of the requests the algorithm under test
// admitted for one key. It says what the exact log would have decided with
// that same history. Its window is the sliding log's: at t it counts what
// was admitted in [t-window, t].
type judge struct {
	window time.Duration
	limit  int
	log    []time.Duration
	head   int
}

// The verdicts of judge.judge.
const (
	right          = -1
	wronglyAllowed = 0
	wronglyDenied  = 1
)

// judge records a decision at t and returns wronglyAllowed, wronglyDenied
// or right.
func (j *judge) judge(t time.Duration, allowed bool) int {
	for j.head < len(j.log) && j.log[j.head] < t-j.window {
		j.head++
	}
	if j.head >= 1024 && 2*j.head >= len(j.log) {
		j.log = append(j.log[:0], j.log[j.head:]...)
		j.head = 0
	}
	exact := len(j.log)-j.head+1 <= j.limit
	if allowed {
		j.log = append(j.log, t)
	}
	switch {
	case allowed && !exact:
		return wronglyAllowed
	case !allowed && exact:
		return wronglyDenied
	}
	return right
}

// generator makes one traffic client's arrivals from its own seeded random
// stream, so that every algorithm sees the same requests. Three clients
// in ten are quiet: Poisson arrivals at 0.05 to 0.5 times the limit's rate.
// Four in ten are steady: Poisson at 0.5 to 1.5 times it. Three in ten are
// bursty: idle for one to four periods on average, then a burst of 0.3 to
// 2 times the limit at ten times its rate.
type generator struct {
	rng    *rand.Rand
	c      Config
	t      time.Duration
	bursty bool
	gap    float64 // quiet and steady: mean µs between requests
	left   int     // bursty: requests left in the current burst
}

func newGenerator(c Config, client int) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(c.Seed, uint64(client))), c: c}
	perUS := float64(c.Rate) / float64(c.Period.Microseconds())
	switch k := g.rng.Float64(); {
	case k < 0.3:
		g.gap = 1 / (perUS * (0.05 + 0.45*g.rng.Float64()))
	case k < 0.7:
		g.gap = 1 / (perUS * (0.5 + g.rng.Float64()))
	default:
		g.bursty = true
	}
	// Start somewhere in the first period, not all at zero.
	g.t = time.Duration(g.rng.Int64N(c.Period.Microseconds())) * time.Microsecond
	return g
}

// next returns the client's next arrival; the first call returns its first.
func (g *generator) next() time.Duration {
	if !g.bursty {
		t := g.t
		g.t += g.exp(g.gap)
		return t
	}
	if g.left == 0 {
		g.t += g.exp(float64(g.c.Period.Microseconds()) * (1 + 3*g.rng.Float64()))
		g.left = int(math.Ceil(float64(g.c.Rate) * (0.3 + 1.7*g.rng.Float64())))
	}
	g.left--
	t := g.t
	g.t += g.exp(float64(g.c.Period.Microseconds()) / float64(g.c.Rate) / 10)
	return t
}

// exp draws an exponential gap of the given mean in µs, at least 1 µs.
func (g *generator) exp(mean float64) time.Duration {
	return time.Duration(max(1, math.Round(g.rng.ExpFloat64()*mean))) * time.Microsecond
}
