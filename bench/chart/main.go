// Command chart draws a grouped bar chart from a Go benchmark results file
// (the raw output that benchstat reads): for one metric, the median over
// the file's rounds of every benchmark matching a filter, with one bar per
// series (a sub-benchmark key such as lib or impl) in each group (another
// key, such as mode or callers). docs/benchmarks.md shows the charts it
// draws from bench/results; bench/charts.sh redraws them all.
//
//	go run ./chart -in results/memory.txt -match MemoryManyKeys -metric sec/op \
//		-series lib -title "1M keys" -out ../docs/img/bench-memory.png
package main

import (
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() {
	var c config
	flag.StringVar(&c.in, "in", "", "results file (Go benchmark format)")
	flag.StringVar(&c.match, "match", "", "only benchmarks whose full name contains every comma-separated part")
	flag.StringVar(&c.metric, "metric", "sec/op", "the unit to draw (sec/op, decisions/s, B/key, ...)")
	flag.StringVar(&c.group, "group", "", "sub-benchmark key whose values make the groups along the x axis (empty: one group)")
	flag.StringVar(&c.series, "series", "lib", "sub-benchmark key whose values make the bars in a group")
	flag.StringVar(&c.order, "order", "", "comma-separated series values to draw, in that order (default: all, as first seen)")
	flag.StringVar(&c.title, "title", "", "chart title")
	flag.StringVar(&c.ylabel, "ylabel", "", "y axis label (default: the metric)")
	flag.StringVar(&c.out, "out", "", "output file (.png or .svg)")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

type config struct {
	in, match, metric, group, series, order, title, ylabel, out string
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
	p, err := draw(t, c)
	if err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 4*vg.Inch, c.out)
}

// read collects, for every (group, series) the filter keeps, the metric's
// samples, and returns their medians.
func read(r io.Reader, c config) (*table, error) {
	samples := map[[2]string][]float64{}
	t := &table{values: map[string]map[string]float64{}}
	parts := strings.Split(c.match, ",")
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
		_, subs := res.Name.Parts()
		key := [2]string{"", ""}
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
		if c.group != "" && key[0] == "" || key[1] == "" {
			continue
		}
		if c.order != "" && !slices.Contains(strings.Split(c.order, ","), key[1]) {
			continue
		}
		if !slices.Contains(t.groups, key[0]) {
			t.groups = append(t.groups, key[0])
		}
		if !slices.Contains(t.series, key[1]) {
			t.series = append(t.series, key[1])
		}
		samples[key] = append(samples[key], v)
	}
	if err := br.Err(); err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("no %s samples match %q", c.metric, c.match)
	}
	if c.order != "" {
		want := strings.Split(c.order, ",")
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

func draw(t *table, c config) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.title
	p.Y.Label.Text = c.ylabel
	if p.Y.Label.Text == "" {
		p.Y.Label.Text = label(c.metric)
	}
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(60)
	n := float64(len(t.series))
	single := len(t.groups) == 1 && t.groups[0] == ""
	w := vg.Points(min(48, 420/(n*float64(len(t.groups)))))
	if single {
		w = vg.Points(min(60, 400/n))
	}
	top := 0.0
	for i, s := range t.series {
		vs := make(plotter.Values, len(t.groups))
		for j, g := range t.groups {
			vs[j] = t.values[g][s]
			top = max(top, vs[j])
		}
		b, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return nil, err
		}
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		offset := vg.Length(float64(i)-(n-1)/2) * w
		if single {
			b.XMin, offset = float64(i), 0 // one bar per series along the axis
		} else {
			b.Offset = offset
			p.Legend.Add(s, b)
		}
		p.Add(b)
		// The value above each bar.
		xys := make(plotter.XYs, len(vs))
		texts := make([]string, len(vs))
		for j, v := range vs {
			xys[j] = plotter.XY{X: float64(j), Y: v}
			if single {
				xys[j].X = float64(i)
			}
			if _, ok := t.values[t.groups[j]][s]; ok {
				texts[j] = format(v)
			}
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return nil, err
		}
		for k := range l.TextStyle {
			l.TextStyle[k].XAlign = -0.5
			l.TextStyle[k].Font.Size = vg.Points(8)
		}
		l.Offset = vg.Point{X: offset, Y: vg.Points(2)}
		p.Add(l)
	}
	p.Y.Max = top * 1.12
	if !single { // room above the bars for the legend, a line per series
		p.Y.Max = top * (1.1 + 0.075*n)
	}
	if single {
		p.NominalX(t.series...)
		return p, nil
	}
	names := slices.Clone(t.groups)
	for i, g := range names {
		names[i] = c.group + "=" + g
	}
	p.NominalX(names...)
	return p, nil
}

// format prints a bar's value with three significant digits.
func format(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// label turns a benchmark unit into an axis label.
func label(unit string) string {
	switch {
	case unit == "sec/op":
		return "ns per operation (lower is better)"
	case strings.HasSuffix(unit, "/s"):
		return unit + " (higher is better)"
	}
	return unit + " (lower is better)"
}

// palette: ratekeeper's bars first, in the project's blue; peers in greys
// and muted colours.
var palette = []color.Color{
	color.RGBA{0x1f, 0x5f, 0xbf, 0xff},
	color.RGBA{0x99, 0x99, 0x99, 0xff},
	color.RGBA{0xd0, 0x8c, 0x3a, 0xff},
	color.RGBA{0x5a, 0xa0, 0x6e, 0xff},
	color.RGBA{0xa0, 0x5a, 0x8c, 0xff},
	color.RGBA{0x60, 0x60, 0x60, 0xff},
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
