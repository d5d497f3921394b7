package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFormatTick(t *testing.T) {
	for _, tc := range []struct {
		v, step, top float64
		want         string
	}{
		{0, 25000, 1e5, "0"},
		{75000, 25000, 1e5, "75k"},
		{250000, 50000, 3.5e5, "250k"},
		{1.5e6, 500000, 3e6, "1.5M"},
		{4000, 1000, 4500, "4,000"}, // as the bars' 4,028: no k below 10,000
		{2500, 500, 4500, "2,500"},
		{40, 10, 55, "40"},
		{0.6, 0.2, 1.6, "0.6"},    // 3 × 0.2 is 0.6000000000000001
		{0.75, 0.25, 1.6, "0.75"}, // two decimals where the step has two
		{1, 0.5, 1.6, "1.0"},
		{-20, 10, 40, "-20"},
	} {
		if got := formatTick(tc.v, tc.step, tc.top); got != tc.want {
			t.Errorf("formatTick(%v, %v, %v) = %q, want %q", tc.v, tc.step, tc.top, got, tc.want)
		}
	}
}

// TestTicksReadable walks the axes the charts draw: every label is short,
// has no exponent and no run of zeros after a point (75000.00).
func TestTicksReadable(t *testing.T) {
	for _, hi := range []float64{1.6, 12, 87, 950, 4500, 87000, 350000, 2.7e6} {
		ts := niceTicks{}.Ticks(0, hi)
		if len(ts) < 3 || len(ts) > 10 {
			t.Errorf("0..%v: %d ticks", hi, len(ts))
		}
		for _, tk := range ts {
			if tk.Value < 0 || tk.Value > hi*1.0000001 {
				t.Errorf("0..%v: tick at %v", hi, tk.Value)
			}
			if strings.ContainsAny(tk.Label, "eE") || strings.Contains(tk.Label, ".00") || len(tk.Label) > 5 {
				t.Errorf("0..%v: tick label %q", hi, tk.Label)
			}
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"},
		{0.205, "0.205"},
		{22.8, "22.8"},
		{22, "22"},
		{154.8, "155"},
		{9614, "9,614"},
		{1301.4, "1,301"},
		{9999.7, "10k"},
		{41162, "41.2k"},
		{309000, "309k"},
		{999.96, "1,000"}, // not 1e+03
		{2647897, "2.65M"},
		{-0.049, "-0.049"},
	} {
		if got := format(tc.v); got != tc.want {
			t.Errorf("format(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestColours(t *testing.T) {
	var series []string
	for i := range palette {
		series = append(series, fmt.Sprint("s", i))
	}
	cs, err := colours(series, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[color.Color]bool{targetStyle.Color: true}
	for i, c := range cs {
		if seen[c] {
			t.Errorf("%s: colour %v used twice, or the target line's", series[i], c)
		}
		seen[c] = true
	}
	if _, err := colours(append(series, "one more"), nil); err == nil {
		t.Error("more series than colours: no error")
	}
	// With an order, a series keeps its colour when another is left out.
	all, err := colours([]string{"direct", "rk", "nginx"}, []string{"direct", "rk", "nginx"})
	if err != nil {
		t.Fatal(err)
	}
	some, err := colours([]string{"rk", "nginx"}, []string{"direct", "rk", "nginx"})
	if err != nil {
		t.Fatal(err)
	}
	if some[0] != all[1] || some[1] != all[2] {
		t.Errorf("rk and nginx: colours %v without direct, %v with it", some, all[1:])
	}
}

const results = `BenchmarkX/callers=1/impl=a-2 1 10 p99-µs 100 decisions/s
BenchmarkX/callers=1/impl=b-2 1 30 p99-µs 50 decisions/s
BenchmarkX/callers=1/impl=base-2 1 4 p99-µs 200 decisions/s
BenchmarkX/callers=1/impl=a-2 1 14 p99-µs 120 decisions/s
BenchmarkX/callers=1/impl=a-2 1 12 p99-µs 90 decisions/s
BenchmarkX/callers=8/impl=b-2 1 60 p99-µs 80 decisions/s
BenchmarkX/callers=8/impl=base-2 1 5 p99-µs 300 decisions/s
BenchmarkY/callers=8/impl=c-2 1 1 p99-µs 1 decisions/s
`

func TestRead(t *testing.T) {
	c := config{in: "x", match: "X", metric: "p99-µs", group: "callers", series: "impl", order: "b,a", scale: 0.001}
	tb, err := read(strings.NewReader(results), c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tb.series, []string{"b", "a"}) || !slices.Equal(tb.groups, []string{"1", "8"}) {
		t.Errorf("series %v, groups %v: want [b a] (the order given), [1 8]", tb.series, tb.groups)
	}
	if got := tb.values["1"]["a"]; got != 0.012 { // median of 10, 14, 12 µs, in ms
		t.Errorf("a at 1 caller: %v, want 0.012", got)
	}
	if _, ok := tb.values["8"]["a"]; ok {
		t.Error("a at 8 callers: a value where none was measured")
	}
}

func TestSubtract(t *testing.T) {
	c := config{in: "x", match: "X", metric: "p99-µs", group: "callers", series: "impl", order: "a,b", minus: "base"}
	tb, err := read(strings.NewReader(results), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.subtract("base"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tb.series, []string{"a", "b"}) {
		t.Errorf("series %v, want [a b]: base drawn", tb.series)
	}
	if got := tb.values["1"]["a"]; got != 12-4 {
		t.Errorf("a at 1 caller less base: %v, want 8", got)
	}
	if got := tb.values["8"]["b"]; got != 60-5 {
		t.Errorf("b at 8 callers less base: %v, want 55", got)
	}
	if err := tb.subtract("nobody"); err == nil {
		t.Error("-minus with no such series: no error")
	}
}

// TestLegend: every series drawn is named in the legend, in the colour of
// its bars, none sharing one, and the target line too.
func TestLegend(t *testing.T) {
	tb := &table{groups: []string{""}, series: []string{"rk_1", "nginx", "go_rp"}, values: map[string]map[string]float64{"": {"rk_1": 1, "nginx": 2, "go_rp": 3}}}
	ch, err := newChart(tb, config{names: "rk_1=rk-1,go_rp=go-rp", target: 1, targetLabel: "target: 1 ms"})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for i, e := range ch.legend() {
		texts = append(texts, e.text)
		if i < len(tb.series) && (e.line != nil || e.color != ch.colors[i]) {
			t.Errorf("%s: legend swatch is not its bars' colour", e.text)
		}
	}
	if want := []string{"rk-1", "nginx", "go-rp", "target: 1 ms"}; !slices.Equal(texts, want) {
		t.Errorf("legend %q, want %q", texts, want)
	}
	if rows := legendRows(ch.legend(), 200); len(rows) < 2 {
		t.Errorf("4 entries in 200 points: %d row", len(rows))
	}
	if err := ch.save(filepath.Join(t.TempDir(), "c.png")); err != nil {
		t.Fatal(err)
	}
}
