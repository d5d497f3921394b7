package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func concurrencyScenario(t testing.TB, set func(*Config)) Config {
	t.Helper()
	c, err := Scenario("concurrency", set)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runConcurrencyT(t testing.TB, c Config) *ConcurrencyResult {
	t.Helper()
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*ConcurrencyResult)
}

// checkConcurrency demands what a concurrency limit promises, every tick:
// never more than Max in flight, and every request offered either admitted
// or refused.
func checkConcurrency(t *testing.T, r *ConcurrencyResult) {
	t.Helper()
	c, s := r.Config, r.Summary
	admitted, refused, peak := 0, 0, 0
	for _, x := range r.Samples {
		if x.Peak > c.Max || x.Mean > float64(x.Peak)+1e-9 || x.Mean < 0 {
			t.Errorf("%+v at %v: %d in flight at most, %.3f on average, max %d", c, x.At, x.Peak, x.Mean, c.Max)
		}
		admitted += x.Admitted
		refused += x.Refused
		peak = max(peak, x.Peak)
	}
	if admitted != s.Admitted || refused != s.Refused || s.Admitted+s.Refused != s.Offered || peak != s.PeakInFlight || s.PeakInFlight > c.Max {
		t.Errorf("%+v: summary %+v; the ticks admitted %d, refused %d, peak %d", c, s, admitted, refused, peak)
	}
	// Requests arrive at 0, 1/rate, 2/rate... before Duration.
	if want := c.Duration.Seconds() * c.offered(); float64(s.Offered) < want-1e-6 || float64(s.Offered) >= want+1 {
		t.Errorf("%+v: %d offered, want %.3f rounded up", c, s.Offered, want)
	}
}

func TestRunConcurrency(t *testing.T) {
	// Below capacity with fixed holds (Little: 5 in flight of 10) nothing
	// is refused, and the mean in flight is Little's λW.
	r := runConcurrencyT(t, concurrencyScenario(t, func(c *Config) { c.Load, c.Jitter = 0.5, false }))
	checkConcurrency(t, r)
	if s := r.Summary; s.Refused != 0 || s.Offered != 500 || s.PeakInFlight != 5 || s.MeanInFlight < 4.9 || s.MeanInFlight > 5 || s.LittleInFlight != 5 {
		t.Fatalf("below capacity: %+v", s)
	}
	// At capacity, exactly: a request ending makes room for the one
	// arriving at that instant.
	r = runConcurrencyT(t, concurrencyScenario(t, func(c *Config) { c.Load, c.Jitter = 1, false }))
	checkConcurrency(t, r)
	if s := r.Summary; s.Refused != 0 || s.PeakInFlight != 10 {
		t.Fatalf("at capacity: %+v", s)
	}
	// The default: 1.5 times capacity with exponential holds. In flight
	// stays at Max and about a third is refused.
	r = runConcurrencyT(t, concurrencyScenario(t, nil))
	checkConcurrency(t, r)
	if s := r.Summary; s.PeakInFlight != 10 || s.Offered != 1500 || s.UnlimitedInFlight != 15 || s.RefusedPct < 25 || s.RefusedPct > 50 {
		t.Fatalf("1.5 times capacity: %+v", s)
	}
	// Twice capacity: about half is refused.
	r = runConcurrencyT(t, concurrencyScenario(t, func(c *Config) { c.Load = 2 }))
	checkConcurrency(t, r)
	if s := r.Summary; s.RefusedPct < 40 || s.RefusedPct > 75 {
		t.Fatalf("twice capacity: %+v", s)
	}
}

// Odd loads, holds and ticks keep the promises too, and the same config
// gives the same bytes.
func TestConcurrencyShapes(t *testing.T) {
	for _, set := range []func(*Config){
		func(c *Config) {
			c.Max, c.Load, c.Hold, c.Tick = 1, 3, 7*time.Millisecond, 33*time.Millisecond
		},
		func(c *Config) {
			c.Max, c.Load, c.Duration, c.Tick = 3, 0.9, 2500*time.Millisecond, time.Second
		},
		func(c *Config) { c.Max, c.Load, c.Hold, c.Jitter = 50, 1.1, time.Second, false },
		func(c *Config) { c.Load, c.Seed = 0.2, 99 },
	} {
		c := concurrencyScenario(t, set)
		var outs [2][4]bytes.Buffer
		for i := range outs {
			r := runConcurrencyT(t, c)
			checkConcurrency(t, r)
			for k, write := range []func(w *bytes.Buffer) error{
				func(w *bytes.Buffer) error { return r.WriteCSV(w) },
				func(w *bytes.Buffer) error { return r.WriteJSON(w) },
				func(w *bytes.Buffer) error { return r.WriteTable(w) },
				func(w *bytes.Buffer) error { return r.WriteSVG(w) },
			} {
				if err := write(&outs[i][k]); err != nil {
					t.Fatal(err)
				}
			}
		}
		for k := range outs[0] {
			if outs[0][k].Len() == 0 || !bytes.Equal(outs[0][k].Bytes(), outs[1][k].Bytes()) {
				t.Errorf("%+v: output %d differs between two runs", c, k)
			}
		}
	}
	// Another seed draws other holds.
	a := runConcurrencyT(t, concurrencyScenario(t, nil)).Summary
	b := runConcurrencyT(t, concurrencyScenario(t, func(c *Config) { c.Seed = 2 })).Summary
	if a.MeanHoldSeconds == b.MeanHoldSeconds {
		t.Errorf("seeds 1 and 2 drew the same holds: %+v", a)
	}
}

// The output formats are a contract.
func TestConcurrencyFormats(t *testing.T) {
	r := runConcurrencyT(t, concurrencyScenario(t, func(c *Config) {
		c.Load, c.Jitter, c.Duration, c.Tick = 0.5, false, time.Second, 250*time.Millisecond
	}))
	var csv bytes.Buffer
	if err := r.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	// 50 per second held 100 ms: 5 in flight from 80 ms on, 12 or 13
	// arrivals a tick.
	want := "t_ms,peak_in_flight,mean_in_flight,admitted,refused,max\n" +
		"0,5,4.2,13,0,10\n" +
		"250,5,5,12,0,10\n" +
		"500,5,5,13,0,10\n" +
		"750,5,5,12,0,10\n"
	if csv.String() != want {
		t.Errorf("CSV:\n%s\nwant:\n%s", csv.String(), want)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(js.Bytes(), &obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"max", "offered", "admitted", "refused", "refused_pct", "peak_in_flight", "mean_in_flight",
		"offered_per_second", "admitted_per_second", "capacity_per_second", "mean_hold_seconds", "little_in_flight", "unlimited_in_flight"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("JSON object without %q: %s", k, js.String())
		}
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"max 10, hold 100ms, 50/s offered: 0.5× what the slots serve (100/s), for 1s", "Little's law, L = λW", "50/s × 100ms = 5", "peak in flight"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table without %q:\n%s", s, table.String())
		}
	}
}

func TestConcurrencyConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Name = "" }, "name"},
		{func(c *Config) { c.Name = "a/b" }, "name"},
		{func(c *Config) { c.Max = 0 }, "max"},
		{func(c *Config) { c.Max = 1e6 }, "max"},
		{func(c *Config) { c.Load = 0 }, "load"},
		{func(c *Config) { c.Load = 1e9 }, "load"},
		{func(c *Config) { c.Hold = 0 }, "hold"},
		{func(c *Config) { c.Hold = time.Nanosecond }, "hold"},
		{func(c *Config) { c.Duration = 0 }, "duration"},
		{func(c *Config) { c.Tick = 0 }, "tick"},
		{func(c *Config) { c.Tick = time.Microsecond }, "tick"},
	} {
		_, err := Run(context.Background(), concurrencyScenario(t, tc.set))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one about %q", err, tc.want)
		}
	}
}

// FuzzConcurrency runs small random concurrency workloads and checks the
// promises every tick.
func FuzzConcurrency(f *testing.F) {
	f.Add(uint8(10), uint8(15), uint16(100), true, uint64(1))
	f.Add(uint8(1), uint8(50), uint16(3), false, uint64(2))
	f.Add(uint8(7), uint8(3), uint16(1000), true, uint64(3))
	f.Fuzz(func(t *testing.T, max, load uint8, holdMs uint16, jitter bool, seed uint64) {
		c := Config{Name: "fuzz", Kind: KindConcurrency, Max: 1 + int(max%50), Load: 0.1 + float64(load%40)/10,
			Hold: time.Duration(1+holdMs%2000) * time.Millisecond, Jitter: jitter, Seed: seed,
			Duration: 2 * time.Second, Tick: 100 * time.Millisecond}
		checkConcurrency(t, runConcurrencyT(t, c))
	})
}
