package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/sim/chart"
)

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
	for i := range chart.Palette {
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
	ch, err := newFigure(tb, config{names: "rk_1=rk-1,go_rp=go-rp", target: 1, targetLabel: "target: 1 ms"})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for i, e := range ch.legend() {
		texts = append(texts, e.Text)
		if i < len(tb.series) && (e.Line != nil || e.Color != ch.colors[i]) {
			t.Errorf("%s: legend swatch is not its bars' colour", e.Text)
		}
	}
	if want := []string{"rk-1", "nginx", "go-rp", "target: 1 ms"}; !slices.Equal(texts, want) {
		t.Errorf("legend %q, want %q", texts, want)
	}
	if rows := legend.Rows(ch.legend(), 200); len(rows) < 2 {
		t.Errorf("4 entries in 200 points: %d row", len(rows))
	}
	if err := ch.save(filepath.Join(t.TempDir(), "c.png")); err != nil {
		t.Fatal(err)
	}
}
