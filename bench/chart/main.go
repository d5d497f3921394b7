// Command chart draws a grouped bar chart from a Go benchmark results file,
// the raw output that benchstat reads. It draws one metric: the median over
// the file's rounds of every benchmark matching a filter. Each group (a
// sub-benchmark key, such as mode or callers) has one bar per series
// (another key, such as lib or impl). The title and the legend sit above
// the plot, never over the bars. Each series has a colour of its own, and
// every value is written on its bar. The charts in docs/benchmarks.md are
// drawn from bench/results; bench/charts.sh redraws them all.
//
//	go run ./chart -in results/memory.txt -match MemoryManyKeys -metric sec/op \
//		-series lib -title "1M keys" -out ../docs/img/bench-memory.png
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

func main() {
	var c config
	flag.StringVar(&c.in, "in", "", "results file (Go benchmark format)")
	flag.StringVar(&c.match, "match", "", "only benchmarks whose full name contains every comma-separated part")
	flag.StringVar(&c.metric, "metric", "sec/op", "the unit to draw (sec/op, decisions/s, B/key, ...)")
	flag.Float64Var(&c.scale, "scale", 1, "multiply every value by this (0.001: µs to ms)")
	flag.StringVar(&c.group, "group", "", "sub-benchmark key whose values make the groups along the x axis (empty: one group)")
	flag.StringVar(&c.series, "series", "lib", "sub-benchmark key whose values make the bars in a group")
	flag.StringVar(&c.order, "order", "", "comma-separated series values to draw, in that order (default: all, as first seen)")
	flag.StringVar(&c.names, "names", "", "comma-separated value=name pairs: how to write series and group values")
	flag.StringVar(&c.minus, "minus", "", "a series subtracted from the others in each group, and not drawn")
	flag.StringVar(&c.title, "title", "", "chart title")
	flag.StringVar(&c.subtitle, "subtitle", "", "a line under the title: the setup, where the numbers come from")
	flag.StringVar(&c.ylabel, "ylabel", "", "y axis label, with the unit (default: the metric)")
	flag.StringVar(&c.xlabel, "xlabel", "", "x axis label; with it the groups are written as their bare values")
	flag.Float64Var(&c.target, "target", 0, "draw a horizontal line at this value (0: none)")
	flag.StringVar(&c.targetLabel, "target-label", "target", "the target line's name in the legend")
	flag.StringVar(&c.out, "out", "", "output file (.png or .svg)")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

type config struct {
	in, match, metric, group, series, order, names, minus string
	title, subtitle, ylabel, xlabel, targetLabel, out     string
	scale, target                                         float64
}

// table is the medians to draw: values[group][series].
type table struct {
	groups, series []string
	values         map[string]map[string]float64
}

func run(c config) error {
	if c.in == "" || c.out == "" {
		return errors.New("-in and -out are required")
	}
	f, err := os.Open(c.in)
	if err != nil {
		return err
	}
	defer f.Close()
	t, err := read(f, c)
	if err != nil {
		return fmt.Errorf("%s: %w", c.in, err)
	}
	if c.minus != "" {
		if err := t.subtract(c.minus); err != nil {
			return fmt.Errorf("%s: %w", c.in, err)
		}
	}
	ch, err := newFigure(t, c)
	if err != nil {
		return err
	}
	return ch.save(c.out)
}

// read collects, for every (group, series) the filter keeps, the metric's
// samples, and returns their medians.
func read(r io.Reader, c config) (*table, error) {
	samples := map[[2]string][]float64{}
	t := &table{values: map[string]map[string]float64{}}
	parts := strings.Split(c.match, ",")
	var want []string
	if c.order != "" {
		want = strings.Split(c.order, ",")
		if c.minus != "" && !slices.Contains(want, c.minus) {
			want = append(want, c.minus)
		}
	}
	scale := c.scale
	if scale == 0 {
		scale = 1
	}
	br := benchfmt.NewReader(r, c.in)
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // syntax errors and unit metadata
		}
		name := string(res.Name)
		if !containsAll(name, parts) {
			continue
		}
		v, ok := value(res, c.metric)
		if !ok {
			continue
		}
		key, ok := keyOf(res, c)
		if !ok || want != nil && !slices.Contains(want, key[1]) {
			continue
		}
		if !slices.Contains(t.groups, key[0]) {
			t.groups = append(t.groups, key[0])
		}
		if !slices.Contains(t.series, key[1]) {
			t.series = append(t.series, key[1])
		}
		samples[key] = append(samples[key], v*scale)
	}
	if err := br.Err(); err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("no %s samples match %q", c.metric, c.match)
	}
	if want != nil {
		slices.SortStableFunc(t.series, func(a, b string) int { return index(want, a) - index(want, b) })
	}
	for k, vs := range samples {
		if t.values[k[0]] == nil {
			t.values[k[0]] = map[string]float64{}
		}
		t.values[k[0]][k[1]] = median(vs)
	}
	return t, nil
}

// keyOf is res's group and series, from its sub-benchmark names; false
// when it lacks one the chart needs.
func keyOf(res *benchfmt.Result, c config) ([2]string, bool) {
	_, subs := res.Name.Parts()
	var key [2]string
	for _, s := range subs {
		k, val, _ := strings.Cut(strings.TrimPrefix(string(s), "/"), "=")
		val = trimProcs(val)
		switch k {
		case c.group:
			key[0] = val
		case c.series:
			key[1] = val
		}
	}
	return key, (c.group == "" || key[0] != "") && key[1] != ""
}

// subtract takes base's median from every other series' in each group
// (the proxies' p99 less the direct path's: what each adds), and drops base.
func (t *table) subtract(base string) error {
	if !slices.Contains(t.series, base) {
		return fmt.Errorf("-minus %s: no such series", base)
	}
	for _, g := range t.groups {
		b, ok := t.values[g][base]
		if !ok {
			return fmt.Errorf("-minus %s: none in group %q", base, g)
		}
		for s := range t.values[g] {
			t.values[g][s] -= b
		}
		delete(t.values[g], base)
	}
	t.series = slices.DeleteFunc(t.series, func(s string) bool { return s == base })
	return nil
}

// value reads unit from res, converting time per op to nanoseconds.
func value(res *benchfmt.Result, unit string) (float64, bool) {
	for _, v := range res.Values {
		if v.Unit == unit || v.OrigUnit == unit {
			if v.Unit == "sec/op" || strings.HasPrefix(v.Unit, "cpu-sec") {
				return v.Value * 1e9, true
			}
			if v.OrigUnit == unit {
				return v.OrigValue, true
			}
			return v.Value, true
		}
	}
	return 0, false
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// trimProcs drops the -GOMAXPROCS suffix that the last sub-benchmark name
// carries ("ratekeeper-2").
func trimProcs(v string) string {
	if i := strings.LastIndexByte(v, '-'); i > 0 && strings.Trim(v[i+1:], "0123456789") == "" {
		return v[:i]
	}
	return v
}

func index(xs []string, x string) int {
	if i := slices.Index(xs, x); i >= 0 {
		return i
	}
	return len(xs)
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
