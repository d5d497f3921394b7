package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func scenario(t testing.TB, name string, set func(*Config)) Config {
	t.Helper()
	c, err := Scenario(name, set)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func run(t testing.TB, c Config) *Result {
	t.Helper()
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*Result)
}

func outcome(t testing.TB, r *Result, a ratekeeper.Algorithm) Outcome {
	t.Helper()
	for _, o := range r.Outcomes {
		if o.Algorithm == a {
			return o
		}
	}
	t.Fatalf("no outcome for %s", a)
	return Outcome{}
}

// checkNothingLost demands that every algorithm did every item.
func checkNothingLost(t *testing.T, r *Result) {
	t.Helper()
	for _, o := range r.Outcomes {
		s := o.Summary
		sum := 0
		for _, n := range o.Counts {
			sum += n
		}
		if s.ItemsLost != 0 || sum != s.ItemsDone || s.ItemsDone+s.ItemsRefused != s.Items {
			t.Errorf("%s %s: items %d, done %d (bars sum to %d), refused %d, lost %d", r.Config.Name, o.Algorithm, s.Items, s.ItemsDone, sum, s.ItemsRefused, s.ItemsLost)
		}
	}
}

// The reference experiment, measured: what the issue says one must see.
func TestPacing(t *testing.T) {
	c := scenario(t, "pacing", nil)
	if c.Rate != 1000 || c.Period != time.Second || c.Burst != 0 || c.Items != 10_000 || c.Tick != 100*time.Millisecond || c.Behaviour != AskUntilAllowed {
		t.Fatalf("pacing is not the reference experiment: %+v", c)
	}
	start := time.Now()
	r := run(t, c)
	if d := time.Since(start); d > 5*time.Second {
		// Well under a second normally; -race and a busy machine slow it.
		t.Errorf("10 simulated seconds took %v", d)
	}
	checkNothingLost(t, r)
	perTick := 100 // rate × tick
	for _, o := range r.Outcomes {
		s := o.Summary
		if s.ItemsDone != 10_000 {
			t.Errorf("%s: %d items done", o.Algorithm, s.ItemsDone)
		}
		// Nobody can beat the rate after the first burst: 9000 more items
		// at 1000/s take 9 s.
		if s.SecondsToFinish < 9 || s.SecondsToFinish > 10.1 {
			t.Errorf("%s: finished after %v s", o.Algorithm, s.SecondsToFinish)
		}
	}

	// Token bucket: never more than rate × tick + burst in a tick; after
	// the start-up burst, an even 100 per tick.
	tb := outcome(t, r, ratekeeper.TokenBucket)
	for i, n := range tb.Counts {
		if n > perTick+1000 {
			t.Errorf("token bucket: %d items in tick %d, more than rate×tick + burst", n, i)
		}
		if i > 0 && i < 90 && (n < perTick-1 || n > perTick+1) {
			t.Errorf("token bucket: %d items in tick %d, not an even %d", n, i, perTick)
		}
	}
	if tb.Counts[0] < 1000 {
		t.Errorf("token bucket: the start-up burst is %d, want the whole bucket (1000) and more", tb.Counts[0])
	}

	// Fixed window and sliding log: each second's quota in its first tick,
	// then nothing until the next second.
	for _, a := range []ratekeeper.Algorithm{ratekeeper.FixedWindow, ratekeeper.SlidingLog} {
		o := outcome(t, r, a)
		for i, n := range o.Counts {
			want := 0
			if i%10 == 0 && i < 100 {
				want = 1000
			}
			if n != want {
				t.Errorf("%s: %d items in tick %d, want %d", a, n, i, want)
			}
		}
		if o.Summary.MaxPerWindow > 1000 {
			t.Errorf("%s: %d items within one window", a, o.Summary.MaxPerWindow)
		}
	}

	// Sliding window counter: spreads the work evenly after the first
	// second.
	sw := outcome(t, r, ratekeeper.SlidingWindow)
	for i := 11; i < 99; i++ {
		if n := sw.Counts[i]; n < perTick-2 || n > perTick+2 {
			t.Errorf("sliding window: %d items in tick %d, not an even %d", n, i, perTick)
		}
	}
	if sw.Summary.MaxPerWindow > 1000 {
		t.Errorf("sliding window: %d items within one window", sw.Summary.MaxPerWindow)
	}
	// Even is measurable: the coefficient of variation.
	if tb.Summary.CVPerTick >= outcome(t, r, ratekeeper.FixedWindow).Summary.CVPerTick/2 {
		t.Errorf("token bucket's CV %v is not well below fixed window's %v", tb.Summary.CVPerTick, outcome(t, r, ratekeeper.FixedWindow).Summary.CVPerTick)
	}
}

// Both worker behaviours lose nothing in every worker scenario, and keep
// the sliding log and the buckets within their bounds.
func TestWorkersLoseNothing(t *testing.T) {
	for _, name := range []string{"pacing", "pacing-with-pauses", "boundary"} {
		for _, b := range []Behaviour{AskUntilAllowed, WaitPacing} {
			t.Run(name+"/"+string(b), func(t *testing.T) {
				r := run(t, scenario(t, name, func(c *Config) { c.Behaviour = b }))
				checkNothingLost(t, r)
				c := r.Config
				for _, o := range r.Outcomes {
					if o.Summary.ItemsDone != c.Items {
						t.Errorf("%s: %d of %d items done", o.Algorithm, o.Summary.ItemsDone, c.Items)
					}
				}
				if m := outcome(t, r, ratekeeper.SlidingLog).Summary.MaxPerWindow; m > c.Rate {
					t.Errorf("sliding log: %d within one window, limit %d", m, c.Rate)
				}
				for _, a := range []ratekeeper.Algorithm{ratekeeper.TokenBucket, ratekeeper.LeakyBucket} {
					for i, n := range outcome(t, r, a).Counts {
						if float64(n) > c.perTick()+float64(c.Rate) {
							t.Errorf("%s: %d in tick %d, more than rate×tick + burst", a, n, i)
						}
					}
				}
				// No work while paused: the ticks wholly inside a pause are
				// empty.
				for _, p := range c.Pauses {
					for i := int((p.At + c.Tick - 1) / c.Tick); time.Duration(i+1)*c.Tick <= p.end(); i++ {
						for _, o := range r.Outcomes {
							if o.Counts[i] != 0 {
								t.Errorf("%s: %d items in tick %d, during the pause %v", o.Algorithm, o.Counts[i], i, p)
							}
						}
					}
				}
				if b == WaitPacing {
					// The leaky bucket's queue shapes: one slot per
					// millisecond, never a burst.
					lb := outcome(t, r, ratekeeper.LeakyBucket)
					for i, n := range lb.Counts {
						if float64(n) > c.perTick()+1 {
							t.Errorf("leaky bucket queue: %d in tick %d", n, i)
						}
					}
				}
			})
		}
	}
}

// The boundary burst: a fixed window admits close to twice its limit within
// one window-length (here within 100 ms), the sliding log never more than
// the limit.
func TestBoundary(t *testing.T) {
	r := run(t, scenario(t, "boundary", nil))
	checkNothingLost(t, r)
	fw := outcome(t, r, ratekeeper.FixedWindow)
	if m := fw.Summary.MaxPerWindow; m < 1900 {
		t.Errorf("fixed window: at most %d within one window, want close to 2000", m)
	}
	if fw.Counts[9] != 1000 || fw.Counts[10] != 1000 {
		t.Errorf("fixed window: %d in [0.9s, 1s) and %d in [1s, 1.1s), want 1000 and 1000", fw.Counts[9], fw.Counts[10])
	}
	if fw.Summary.SecondsToFinish > 0.11 {
		t.Errorf("fixed window: twice the limit took %v s", fw.Summary.SecondsToFinish)
	}
	if m := outcome(t, r, ratekeeper.SlidingLog).Summary.MaxPerWindow; m > 1000 {
		t.Errorf("sliding log: %d within one window", m)
	}
}

// Accuracy on a smaller workload (the race detector is slow): the judge
// agrees with the sliding log exactly; token bucket and fixed window never
// deny what the log would allow (they are never stricter); every request
// gets an answer.
func TestAccuracy(t *testing.T) {
	r := run(t, scenario(t, "accuracy", func(c *Config) { c.Clients, c.Duration = 40, 10*time.Second }))
	checkNothingLost(t, r)
	for _, o := range r.Outcomes {
		s := o.Summary
		if s.WronglyAllowedPct == nil || s.WronglyDeniedPct == nil {
			t.Fatalf("%s: accuracy without wrongly_*_pct", o.Algorithm)
		}
		if s.ItemsRefused == 0 || s.ItemsDone == 0 {
			t.Errorf("%s: %d allowed, %d refused: the workload does not test the limit", o.Algorithm, s.ItemsDone, s.ItemsRefused)
		}
		if want := pct(*s.WronglyAllowed, s.Decisions); *s.WronglyAllowedPct != want {
			t.Errorf("%s: wrongly allowed %v%%, want %v%%", o.Algorithm, *s.WronglyAllowedPct, want)
		}
		switch o.Algorithm {
		case ratekeeper.SlidingLog:
			if *s.WronglyAllowed != 0 || *s.WronglyDenied != 0 || s.MaxPerWindow > r.Config.Rate {
				t.Errorf("sliding log judged against itself: %d wrongly allowed, %d wrongly denied, %d in a window", *s.WronglyAllowed, *s.WronglyDenied, s.MaxPerWindow)
			}
		case ratekeeper.TokenBucket, ratekeeper.LeakyBucket, ratekeeper.FixedWindow:
			if *s.WronglyDenied != 0 {
				t.Errorf("%s: %d wrongly denied, but it is never stricter than the log", o.Algorithm, *s.WronglyDenied)
			}
			if *s.WronglyAllowed == 0 || s.OverAdmission == 0 {
				t.Errorf("%s: never over the log's limit: the workload has no bursts", o.Algorithm)
			}
		case ratekeeper.SlidingWindow:
			if *s.WronglyAllowed == 0 || *s.WronglyDenied == 0 {
				t.Errorf("sliding window: %d wrongly allowed and %d wrongly denied; an estimate errs both ways", *s.WronglyAllowed, *s.WronglyDenied)
			}
		}
	}
}

// The judge on a timeline: 2 per 10 s, with the sliding log's window
// [t-W, t] (an entry exactly W old still counts).
func TestJudge(t *testing.T) {
	j := judge{window: 10 * time.Second, limit: 2}
	steps := []struct {
		at      time.Duration
		allowed bool
		want    int
	}{
		{0, true, right},
		{time.Second, true, right},
		{2 * time.Second, true, wronglyAllowed}, // a third in the window
		{3 * time.Second, false, right},
		{10 * time.Second, false, right},                          // the entry at 0 s still counts
		{11*time.Second + time.Microsecond, false, wronglyDenied}, // 0 s and 1 s are gone: 1 < 2
		{12*time.Second + time.Microsecond, true, right},          // 2 s is gone too
	}
	for i, s := range steps {
		if got := j.judge(s.at, s.allowed); got != s.want {
			t.Errorf("step %d at %v (allowed %v): verdict %d, want %d", i, s.at, s.allowed, got, s.want)
		}
	}
}

func TestMaxInWindow(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		ts   []time.Duration
		want int
	}{
		{nil, 0},
		{[]time.Duration{0}, 1},
		{[]time.Duration{0, s}, 1}, // [t, t+W) holds one of them
		{[]time.Duration{0, s - 1}, 2},
		{[]time.Duration{0, 0, 500 * time.Millisecond, s, s, s + 1}, 4},
	} {
		if got := maxInWindow(tc.ts, s); got != tc.want {
			t.Errorf("maxInWindow(%v) = %d, want %d", tc.ts, got, tc.want)
		}
	}
}

// The same Config gives the same bytes: CSV, JSON, SVG and PNG.
func TestDeterministic(t *testing.T) {
	for _, c := range []Config{
		scenario(t, "pacing-with-pauses", func(c *Config) { c.Items = 3000 }),
		scenario(t, "accuracy", func(c *Config) { c.Clients, c.Duration = 10, 3*time.Second }),
	} {
		var outs [2][4]bytes.Buffer
		for i := range outs {
			r := run(t, c)
			for k, w := range []func(*bytes.Buffer) error{
				func(b *bytes.Buffer) error { return r.WriteCSV(b) },
				func(b *bytes.Buffer) error { return r.WriteJSON(b) },
				func(b *bytes.Buffer) error { return r.WriteSVG(b) },
				func(b *bytes.Buffer) error { return r.WritePNG(b) },
			} {
				if err := w(&outs[i][k]); err != nil {
					t.Fatal(err)
				}
			}
		}
		for k, what := range []string{"CSV", "JSON", "SVG", "PNG"} {
			if outs[0][k].Len() == 0 || !bytes.Equal(outs[0][k].Bytes(), outs[1][k].Bytes()) {
				t.Errorf("%s: %s differs between two runs of the same config (%d and %d bytes)", c.Name, what, outs[0][k].Len(), outs[1][k].Len())
			}
		}
	}
	// And the seed matters.
	var a, b bytes.Buffer
	c := scenario(t, "accuracy", func(c *Config) { c.Clients, c.Duration = 10, 3*time.Second })
	run(t, c).WriteCSV(&a)
	c.Seed = 2
	run(t, c).WriteCSV(&b)
	if bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("seeds 1 and 2 give the same traffic")
	}
}

// The output formats are a contract.
func TestFormats(t *testing.T) {
	r := run(t, scenario(t, "accuracy", func(c *Config) { c.Clients, c.Duration = 5, 2*time.Second }))
	var csv bytes.Buffer
	if err := r.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(csv.String(), "\n"), "\n")
	if lines[0] != "t_ms,algorithm,count" {
		t.Errorf("CSV header %q", lines[0])
	}
	if want := 1 + 5*20; len(lines) != want {
		t.Errorf("%d CSV lines, want %d (5 algorithms × 20 ticks)", len(lines), want)
	}
	if lines[1] != fmt.Sprintf("0,token_bucket,%d", r.Outcomes[0].Counts[0]) || !strings.HasPrefix(lines[2], "100,token_bucket,") {
		t.Errorf("CSV rows %q, %q", lines[1], lines[2])
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	if err := json.Unmarshal(js.Bytes(), &objs); err != nil {
		t.Fatal(err)
	}
	if len(objs) != 5 {
		t.Fatalf("%d JSON objects", len(objs))
	}
	for _, k := range []string{"algorithm", "items_done", "items_lost", "seconds_to_finish", "max_per_tick", "max_per_window", "wrongly_allowed_pct", "wrongly_denied_pct"} {
		if _, ok := objs[0][k]; !ok {
			t.Errorf("JSON object without %q: %v", k, objs[0])
		}
	}
	// Worker scenarios have no judge, so no judge's fields.
	js.Reset()
	if err := run(t, scenario(t, "pacing", func(c *Config) { c.Items = 100 })).WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "wrongly") {
		t.Errorf("pacing JSON has the judge's fields:\n%s", js.String())
	}
}

func TestTickMs(t *testing.T) {
	r := run(t, scenario(t, "custom", func(c *Config) {
		c.Items, c.Tick, c.Algorithms = 10, 2500*time.Microsecond, []ratekeeper.Algorithm{ratekeeper.LeakyBucket}
		c.Behaviour = WaitPacing // one item a millisecond
	}))
	var csv bytes.Buffer
	r.WriteCSV(&csv)
	// Items at 0, 1, ... 9 ms.
	if want := "t_ms,algorithm,count\n0,leaky_bucket,3\n2.5,leaky_bucket,2\n5,leaky_bucket,3\n7.5,leaky_bucket,2\n"; csv.String() != want {
		t.Errorf("fractional milliseconds:\n%s", csv.String())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Rate = 0 }, "rate"},
		{func(c *Config) { c.Algorithms = nil }, "algorithms"},
		{func(c *Config) { c.Algorithms = []ratekeeper.Algorithm{"nope"} }, "unknown algorithm"},
		{func(c *Config) { c.Algorithms = []ratekeeper.Algorithm{ratekeeper.TokenBucket, ratekeeper.TokenBucket} }, "twice"},
		{func(c *Config) { c.Items = -1 }, "items"},
		{func(c *Config) { c.Tick = 0 }, "tick"},
		{func(c *Config) { c.Tick = time.Microsecond }, "bars"},
		{func(c *Config) { c.Behaviour = "sleep" }, "worker"},
		{func(c *Config) { c.Pauses = []Pause{{At: time.Second}} }, "pause"},
		{func(c *Config) { c.Name = "../x" }, "name"},
		{func(c *Config) { c.Clients = 0 }, "clients"},
	} {
		_, err := Run(context.Background(), scenario(t, "pacing", tc.set))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one about %q", err, tc.want)
		}
	}
	if _, err := Scenario("nope", nil); err == nil {
		t.Error("unknown scenario accepted")
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, scenario(t, "pacing", nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v", err)
	}
}

func TestParsePause(t *testing.T) {
	p, err := ParsePause("4s+1s")
	if err != nil || p != (Pause{At: 4 * time.Second, For: time.Second}) {
		t.Errorf("ParsePause(4s+1s) = %v, %v", p, err)
	}
	for _, bad := range []string{"", "4s", "4s+", "+1s", "4s+0s", "-1s+1s", "4s+-1s", "x+1s"} {
		if _, err := ParsePause(bad); err == nil {
			t.Errorf("ParsePause(%q) accepted", bad)
		}
	}
}

func FuzzParsePause(f *testing.F) {
	for _, s := range []string{"4s+1s", "6s+500ms", "0s+1ns", "1h+1h", "4s", "+", "1e9s+1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePause(s)
		if err != nil {
			return
		}
		if p.At < 0 || p.For <= 0 {
			t.Fatalf("ParsePause(%q) = %v", s, p)
		}
		q, err := ParsePause(p.String())
		if err != nil || q != p {
			t.Fatalf("round trip of %q: %v → %q → %v, %v", s, p, p.String(), q, err)
		}
	})
}

// FuzzWorkers runs small random worker scenarios and checks what must hold
// for any of them: nothing is lost, the sliding log never admits more than
// the limit in a window, a bucket never more than its burst plus the rate
// over the window, a fixed window never more than twice its limit.
func FuzzWorkers(f *testing.F) {
	f.Add(uint8(0), uint16(10), uint16(1000), uint16(50), uint8(1), false, uint8(0), uint8(0))
	f.Add(uint8(1), uint16(3), uint16(300), uint16(40), uint8(3), true, uint8(5), uint8(0))
	f.Add(uint8(2), uint16(7), uint16(90), uint16(100), uint8(4), false, uint8(0), uint8(20))
	f.Add(uint8(3), uint16(1), uint16(50), uint16(5), uint8(2), true, uint8(1), uint8(3))
	f.Add(uint8(4), uint16(20), uint16(250), uint16(200), uint8(8), true, uint8(30), uint8(7))
	f.Fuzz(func(t *testing.T, alg uint8, rate, periodMs, items uint16, clients uint8, wait bool, burst, pause uint8) {
		a := ratekeeper.Algorithms[int(alg)%len(ratekeeper.Algorithms)]
		c := Config{
			Name: "fuzz", Algorithms: []ratekeeper.Algorithm{a},
			Rate: 1 + int(rate%50), Period: time.Duration(1+periodMs%2000) * time.Millisecond, Burst: int(burst % 60),
			Tick: 10 * time.Millisecond, Kind: KindWorkers, Items: 1 + int(items%300), Clients: 1 + int(clients%6),
			Behaviour: AskUntilAllowed,
		}
		if wait {
			c.Behaviour = WaitPacing
		}
		if pause > 0 {
			c.Pauses = []Pause{{At: time.Duration(pause) * 7 * time.Millisecond, For: time.Duration(pause) * 3 * time.Millisecond}}
		}
		// Keep the bars few enough.
		for c.span()/c.Tick > 20_000 {
			c.Tick *= 10
		}
		r := run(t, c)
		s := r.Outcomes[0].Summary
		if s.ItemsLost != 0 || s.ItemsDone != c.Items {
			t.Fatalf("%+v: %d of %d done, %d lost", c, s.ItemsDone, c.Items, s.ItemsLost)
		}
		limit := c.Rate
		switch a {
		case ratekeeper.TokenBucket, ratekeeper.LeakyBucket:
			b := c.Burst
			if b == 0 {
				b = c.Rate
			}
			limit = b + c.Rate
		case ratekeeper.FixedWindow, ratekeeper.SlidingWindow:
			limit = 2 * c.Rate
		}
		if s.MaxPerWindow > limit {
			t.Fatalf("%+v: %d in one window, bound %d", c, s.MaxPerWindow, limit)
		}
		if math.IsNaN(s.CVPerTick) {
			t.Fatalf("CV is NaN")
		}
	})
}

// BenchmarkPacing is the reference experiment, all five algorithms: ten
// simulated seconds each.
func BenchmarkPacing(b *testing.B) {
	c := scenario(b, "pacing", nil)
	b.ReportAllocs()
	for b.Loop() {
		run(b, c)
	}
}

// BenchmarkPacingFiles adds what the command writes: CSV, SVG and PNG.
func BenchmarkPacingFiles(b *testing.B) {
	c := scenario(b, "pacing", nil)
	b.ReportAllocs()
	for b.Loop() {
		r := run(b, c)
		for _, w := range []func(io.Writer) error{r.WriteCSV, r.WriteSVG, r.WritePNG} {
			if err := w(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAccuracy is the accuracy scenario: 30 simulated seconds of 100
// clients, about 180,000 judged decisions per algorithm.
func BenchmarkAccuracy(b *testing.B) {
	c := scenario(b, "accuracy", nil)
	b.ReportAllocs()
	for b.Loop() {
		run(b, c)
	}
}
