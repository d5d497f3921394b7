package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/shared"
)

func sharedScenario(t testing.TB, name string, set func(*Config)) Config {
	t.Helper()
	c, err := Scenario(name, set)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runSharedT(t testing.TB, c Config) *SharedResult {
	t.Helper()
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*SharedResult)
}

// checkSharedBounds demands what docs/redis.md promises of each mode, in
// every window: exact admits the limit, or all it is offered below it;
// lease never more than the limit; sync never more than its bound. The
// bound is a rate's: one more request per other instance, whose arrivals
// fall on whole instants, is allowed.
func checkSharedBounds(t *testing.T, r *SharedResult) {
	t.Helper()
	c := r.Config
	L := c.Rate
	offered := int(c.Load * float64(L)) // in any window, or one less
	n := len(c.Split)
	for _, o := range r.Outcomes {
		sum := 0
		for w, a := range o.Admitted {
			sum += a
			switch o.mode {
			case shared.Exact:
				if a > L || a < min(L, offered) {
					t.Errorf("%+v: exact admitted %d in window %d, want %d", c, a, w, min(L, offered))
				}
			case shared.Lease:
				if a > L {
					t.Errorf("%+v: lease at %v admitted %d in window %d, over the limit %d", c, o.SyncPeriod, a, w, L)
				}
			case shared.Sync:
				if float64(a) > o.Bound+float64(n-1) {
					t.Errorf("%+v: sync at %v admitted %d in window %d, over its bound %.1f", c, o.SyncPeriod, a, w, o.Bound)
				}
			}
		}
		s := o.Summary
		if sum != s.Admitted || s.Admitted > s.Offered || len(o.Admitted) != int(c.Duration/c.Period) {
			t.Errorf("%s: windows sum to %d, admitted %d of %d offered", o.label(), sum, s.Admitted, s.Offered)
		}
	}
}

// The charts in docs/redis.md: every mode within what it promises, and
// the trade-off there to see: sync over the limit, the more the longer its
// period, and lease and exact at it.
func TestSharedScenarios(t *testing.T) {
	for _, name := range []string{"shared-roundrobin", "shared-skewed"} {
		t.Run(name, func(t *testing.T) {
			r := runSharedT(t, sharedScenario(t, name, nil))
			c := r.Config
			if len(r.Outcomes) != 1+2*len(c.SyncPeriods) {
				t.Fatalf("%d outcomes", len(r.Outcomes))
			}
			checkSharedBounds(t, r)
			var syncMax []int
			for _, o := range r.Outcomes {
				if o.mode == shared.Sync {
					syncMax = append(syncMax, o.Summary.MaxPerWindow)
				}
				if o.Summary.Offered != int(c.Load*float64(c.Rate))*int(c.Duration/c.Period) {
					t.Errorf("%s: %d offered", o.label(), o.Summary.Offered)
				}
			}
			if !slices.IsSorted(syncMax) || syncMax[len(syncMax)-1] <= c.Rate {
				t.Errorf("sync's most per window at %v: %v; want it over %d and growing with the period", c.SyncPeriods, syncMax, c.Rate)
			}
		})
	}
}

// The balancer deals by weight, evenly: equal weights take turns, and
// 70:20:10 gives each instance its share of every 10 requests.
func TestBalancer(t *testing.T) {
	b := newBalancer([]int{1, 1, 1})
	var got []int
	for range 6 {
		got = append(got, b.next())
	}
	if !slices.Equal(got, []int{0, 1, 2, 0, 1, 2}) {
		t.Errorf("round-robin: %v", got)
	}
	b = newBalancer([]int{70, 20, 10})
	for round := range 5 {
		counts := make([]int, 3)
		for range 10 {
			counts[b.next()]++
		}
		if !slices.Equal(counts, []int{7, 2, 1}) {
			t.Errorf("70:20:10, requests %d to %d: %v", 10*round, 10*round+9, counts)
		}
	}
}

func TestSharedSyncBound(t *testing.T) {
	rr := sharedScenario(t, "shared-roundrobin", nil)
	sk := sharedScenario(t, "shared-skewed", nil)
	for _, tc := range []struct {
		c    Config
		T    time.Duration
		want float64
	}{
		// 250/s offered: the others get 2/3 of it round-robin, 225/s when
		// the instance that knows least gets 25/s.
		{rr, 10 * time.Millisecond, 100 + 500.0/3*0.02},
		{rr, 100 * time.Millisecond, 100 + 500.0/3*0.2},
		{rr, time.Second, 300}, // N·L
		{sk, 10 * time.Millisecond, 104.5},
		{sk, 100 * time.Millisecond, 145},
		{sk, time.Second, 300},
	} {
		if got := tc.c.SyncBound(tc.T); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("%s at %v: bound %v, want %v", tc.c.Name, tc.T, got, tc.want)
		}
	}
}

// The same Config gives the same bytes: CSV, JSON, SVG and PNG.
func TestSharedDeterministic(t *testing.T) {
	c := sharedScenario(t, "shared-skewed", func(c *Config) { c.Duration = 3 * time.Second })
	var outs [2][4]bytes.Buffer
	for i := range outs {
		r := runSharedT(t, c)
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
			t.Errorf("%s differs between two runs of the same config (%d and %d bytes)", what, outs[0][k].Len(), outs[1][k].Len())
		}
	}
}

// The output formats are a contract.
func TestSharedFormats(t *testing.T) {
	r := runSharedT(t, sharedScenario(t, "shared-roundrobin", func(c *Config) {
		c.Duration, c.SyncPeriods = 2*time.Second, []time.Duration{100 * time.Millisecond}
	}))
	var csv bytes.Buffer
	if err := r.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(csv.String(), "\n"), "\n")
	if want := []string{
		"t_ms,mode,sync_period_ms,admitted,bound",
		"0,exact,,100,100",
		"1000,exact,,100,100",
		"0,sync,100," + strconv.Itoa(r.Outcomes[1].Admitted[0]) + ",133.333",
	}; !slices.Equal(lines[:4], want) || len(lines) != 1+3*2 {
		t.Errorf("CSV:\n%s", csv.String())
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	if err := json.Unmarshal(js.Bytes(), &objs); err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 || objs[0]["mode"] != "exact" || objs[0]["sync_period"] != nil || objs[2]["sync_period"] != "100ms" {
		t.Fatalf("JSON: %s", js.String())
	}
	for _, k := range []string{"offered", "admitted", "admitted_per_instance", "max_per_window", "min_per_window", "bound", "store_calls"} {
		if _, ok := objs[1][k]; !ok {
			t.Errorf("JSON object without %q: %v", k, objs[1])
		}
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"round-robin (83/s each)", "250/s offered", "sync 100ms", "lease 100ms", "133.3"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table without %q:\n%s", s, table.String())
		}
	}
}

func TestSharedConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Name = "" }, "name"},
		{func(c *Config) { c.Name = "a/b" }, "name"},
		{func(c *Config) { c.Rate = 0 }, "rate"},
		{func(c *Config) { c.Split = nil }, "split"},
		{func(c *Config) { c.Split = []int{1, 0} }, "split"},
		{func(c *Config) { c.Load = 0 }, "load"},
		{func(c *Config) { c.Load = 1e9 }, "load"},
		{func(c *Config) { c.SyncPeriods = nil }, "sync periods"},
		{func(c *Config) { c.SyncPeriods = []time.Duration{time.Microsecond} }, "sync periods"},
		{func(c *Config) { c.SyncPeriods = []time.Duration{time.Second, time.Second} }, "twice"},
		{func(c *Config) { c.Duration = 1500 * time.Millisecond }, "duration"},
		{func(c *Config) { c.Duration = 0 }, "duration"},
	} {
		_, err := Run(context.Background(), sharedScenario(t, "shared-skewed", tc.set))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one about %q", err, tc.want)
		}
	}
}

// FuzzShared runs small random shared scenarios (instances, weights, load,
// sync period) and checks each mode against what it promises, every
// window.
func FuzzShared(f *testing.F) {
	f.Add(uint8(3), uint8(1), uint8(1), uint8(1), uint16(100), uint8(25), uint16(100))
	f.Add(uint8(3), uint8(70), uint8(20), uint8(10), uint16(100), uint8(25), uint16(1000))
	f.Add(uint8(2), uint8(9), uint8(1), uint8(0), uint16(40), uint8(40), uint16(30))
	f.Add(uint8(4), uint8(1), uint8(5), uint8(3), uint16(500), uint8(8), uint16(7))
	f.Add(uint8(1), uint8(1), uint8(0), uint8(0), uint16(10), uint8(50), uint16(2000))
	f.Fuzz(func(t *testing.T, n, w0, w1, w2 uint8, rate uint16, load uint8, periodMs uint16) {
		c := Config{Name: "fuzz", Kind: KindShared, Rate: 1 + int(rate%500), Period: time.Second,
			Load:        0.5 + float64(load%40)/10,
			SyncPeriods: []time.Duration{time.Duration(1+periodMs%2000) * time.Millisecond},
			Duration:    3 * time.Second}
		ws := []uint8{w0, w1, w2, w0 ^ w1}
		for i := range 1 + int(n%4) {
			c.Split = append(c.Split, 1+int(ws[i]%100))
		}
		checkSharedBounds(t, runSharedT(t, c))
	})
}
