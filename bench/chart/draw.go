package main

import (
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// Geometry and type; the width, the colours and the axes are
// sim/chart's, as in the simulator's charts.
const (
	plotHeight   = 3.4 * vg.Inch
	margin       = 0.2 * vg.Inch
	titleSize    = 13
	subtitleSize = 9.5
	valueSize    = 8
	legendRowH   = 16
)

// legend is the layout of the charts' legends.
var legend = chart.Legend{Size: 9.5, Swatch: 0.25 * vg.Inch, Box: 5, Gap: 0.3 * vg.Inch}

// targetStyle is the target line's.
var targetStyle = draw.LineStyle{Color: chart.Red, Width: 1.6, Dashes: []vg.Length{6, 3}}

// colours gives each series a colour of its own. It is the colour at the
// series' place in order (-order) when there is one, else at its place in
// series. So a contender keeps its colour across the charts drawn with the
// same order, even where some are left out (-minus). More series than
// colours is an error rather than two series in one colour.
func colours(series, order []string) ([]color.Color, error) {
	cs := make([]color.Color, len(series))
	for i, s := range series {
		k := i
		if order != nil {
			k = index(order, s)
		}
		if k >= len(chart.Palette) {
			return nil, fmt.Errorf("series %s is number %d and there are %d colours: draw fewer series (-order)", s, k+1, len(chart.Palette))
		}
		cs[i] = chart.Palette[k]
	}
	return cs, nil
}

// figure is a table ready to draw.
type figure struct {
	c      config
	t      *table
	colors []color.Color
	names  map[string]string
}

func newFigure(t *table, c config) (*figure, error) {
	var order []string
	if c.order != "" {
		order = strings.Split(c.order, ",")
	}
	colors, err := colours(t.series, order)
	if err != nil {
		return nil, err
	}
	names, err := parseNames(c.names)
	if err != nil {
		return nil, err
	}
	return &figure{c: c, t: t, colors: colors, names: names}, nil
}

// parseNames reads -names: "rk_1=rk-1,go_rp=go-rp".
func parseNames(s string) (map[string]string, error) {
	names := map[string]string{}
	if s == "" {
		return names, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("-names: %q is not value=name", pair)
		}
		names[k] = v
	}
	return names, nil
}

func (ch *figure) name(v string) string {
	if n, ok := ch.names[v]; ok {
		return n
	}
	return v
}

// single says whether the chart has one group: then the series stand side
// by side along the x axis, each named under its bar.
func (ch *figure) single() bool { return len(ch.t.groups) == 1 && ch.t.groups[0] == "" }

// legend names every series, in its colour, and the target line.
func (ch *figure) legend() []chart.Entry {
	var es []chart.Entry
	for i, s := range ch.t.series {
		es = append(es, chart.Box(ch.colors[i], ch.name(s)))
	}
	if ch.c.target != 0 {
		es = append(es, chart.Line(targetStyle, ch.c.targetLabel))
	}
	return es
}

// headerHeight is the room above the plot for the title, the subtitle and
// the legend's rows.
func (ch *figure) headerHeight() vg.Length {
	h := margin + titleSize*1.2
	if ch.c.subtitle != "" {
		h += subtitleSize*1.2 + 3
	}
	h += 6 + vg.Length(len(legend.Rows(ch.legend(), chart.Width-2*margin)))*legendRowH
	return h + 4
}

func (ch *figure) save(path string) error {
	return chart.Save(path, chart.Width, ch.headerHeight()+plotHeight, ch.draw)
}

func (ch *figure) draw(dc draw.Canvas) error {
	_, body := chart.Layout(dc, ch.headerHeight(), 0.1*vg.Inch)
	ch.drawHeader(dc)
	body.Min.X += 0.15 * vg.Inch
	body.Max.X -= 0.3 * vg.Inch
	p, err := ch.plot(body)
	if err != nil {
		return err
	}
	p.Draw(body)
	return nil
}

// drawHeader writes the title, the subtitle under it and the legend's
// rows under them: above the plot, never over it.
func (ch *figure) drawHeader(c draw.Canvas) {
	x, y := c.Min.X+margin, c.Max.Y-margin
	c.FillText(chart.Align(chart.Sans(titleSize, true), draw.XLeft, draw.YTop), vg.Point{X: x, Y: y}, ch.c.title)
	y -= titleSize * 1.2
	if ch.c.subtitle != "" {
		y -= 3
		c.FillText(chart.Align(chart.Sans(subtitleSize, false), draw.XLeft, draw.YTop), vg.Point{X: x, Y: y}, ch.c.subtitle)
		y -= subtitleSize * 1.2
	}
	y -= 6 + legendRowH/2
	for _, row := range legend.Rows(ch.legend(), chart.Width-2*margin) {
		legend.Draw(c, x, y, row)
		y -= legendRowH
	}
}

// plot builds the bars, their values and the axes for the canvas c.
func (ch *figure) plot(c draw.Canvas) (*plot.Plot, error) {
	p := plot.New()
	chart.StyleAxes(p, chart.Ticks{}, false)
	p.Y.Label.Text = ch.c.ylabel
	if p.Y.Label.Text == "" {
		p.Y.Label.Text = label(ch.c.metric)
	}
	p.X.Label.Text = ch.c.xlabel
	ticks, perSlot := ch.slots()
	p.NominalX(ticks...)
	p.X.Min, p.X.Max = -0.5, float64(len(ticks))-0.5
	lo, top := ch.yRange()
	p.Y.Min, p.Y.Max = lo, top

	// Bar widths from the data area's width: bars fill 80% of a group's
	// slot (60% of a lone bar's), with a point between neighbours.
	da := p.DataCanvas(c)
	slotW := da.Rectangle.Size().X / vg.Length(len(ticks))
	barW := slotW * 0.8 / vg.Length(perSlot)
	if ch.single() {
		barW = slotW * 0.6
	}
	bs, ls := ch.bars(barW, perSlot)
	// Room above the tallest bar for its value: e points of the data
	// area's height da.Y.
	e := ls.extent() + 6
	if h := da.Rectangle.Size().Y; e < h/2 {
		p.Y.Max = (top - float64(e/h)*lo) / (1 - float64(e/h))
	}

	if ch.c.target != 0 {
		p.Add(&chart.HLine{Y: ch.c.target, Style: targetStyle})
	}
	p.Add(bs, ls)
	return p, nil
}

// slots are the x axis's slots, as the names under them, and the bars in
// each: a group's series, or one series alone.
func (ch *figure) slots() (ticks []string, perSlot int) {
	t := ch.t
	if ch.single() {
		for _, s := range t.series {
			ticks = append(ticks, ch.name(s))
		}
		return ticks, 1
	}
	for _, g := range t.groups {
		if ch.c.xlabel == "" {
			ticks = append(ticks, ch.c.group+"="+ch.name(g))
		} else {
			ticks = append(ticks, ch.name(g))
		}
	}
	return ticks, len(t.series)
}

// yRange is the y axis's span: from the lowest value (or 0) to the highest
// (or the target), never empty.
func (ch *figure) yRange() (lo, top float64) {
	for _, g := range ch.t.groups {
		for _, v := range ch.t.values[g] {
			lo, top = min(lo, v), max(top, v)
		}
	}
	top = max(top, ch.c.target)
	if top == lo {
		top = lo + 1
	}
	return lo, top
}

// bars are the bars barW wide, perSlot to a slot, and their values.
func (ch *figure) bars(barW vg.Length, perSlot int) (bars, *valueLabels) {
	t := ch.t
	var bs bars
	ls := &valueLabels{}
	for i, s := range t.series {
		for j, g := range t.groups {
			v, ok := t.values[g][s]
			if !ok {
				continue
			}
			b := bar{x: float64(j), dx: (vg.Length(i) - vg.Length(perSlot-1)/2) * barW, w: barW - 1, v: v, color: ch.colors[i]}
			if ch.single() {
				b.x, b.dx = float64(i), 0
			}
			bs = append(bs, b)
			ls.add(b.x, b.dx, v, format(v))
		}
	}
	ls.style = valueStyle(chart.Sans(valueSize, false), ls.texts, barW)
	return bs, ls
}

// valueStyle writes the values level above their bars when the widest
// fits a bar's width, else turned to read upwards.
func valueStyle(st text.Style, texts []string, barW vg.Length) text.Style {
	widest := vg.Length(0)
	for _, s := range texts {
		widest = max(widest, st.Width(s))
	}
	if widest <= barW-3 { // a gap of 2 points at least between neighbours
		return chart.Align(st, draw.XCenter, draw.YBottom)
	}
	st = chart.Align(st, draw.XLeft, draw.YCenter)
	st.Rotation = math.Pi / 2
	return st
}

// bar is one bar: at group x, shifted by dx.
type bar struct {
	x     float64
	dx, w vg.Length
	v     float64
	color color.Color
}

type bars []bar

func (bs bars) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	for _, b := range bs {
		x0 := x(b.x) + b.dx - b.w/2
		c.FillPolygon(b.color, c.ClipPolygonXY(chart.Rect(x0, y(0), x0+b.w, y(b.v))))
	}
}

// valueLabels writes each bar's value just above it.
type valueLabels struct {
	xs, ys []float64
	dxs    []vg.Length
	texts  []string
	style  text.Style
}

func (l *valueLabels) add(x float64, dx vg.Length, y float64, s string) {
	l.xs, l.dxs, l.ys, l.texts = append(l.xs, x), append(l.dxs, dx), append(l.ys, y), append(l.texts, s)
}

// extent is how far the labels reach above their bars, in points.
func (l *valueLabels) extent() vg.Length {
	if l.style.Rotation == 0 {
		return l.style.FontExtents().Height
	}
	var w vg.Length
	for _, s := range l.texts {
		w = max(w, l.style.Width(s))
	}
	return w
}

func (l *valueLabels) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	for i, s := range l.texts {
		c.FillText(l.style, vg.Point{X: x(l.xs[i]) + l.dxs[i], Y: y(max(l.ys[i], 0)) + 3}, s)
	}
}

// format writes a bar's value to three significant digits, without
// trailing zeros: in thousands (41.2k) or millions (2.65M) when it is that
// large. From 1,000 to 9,999 it is whole, as the docs' tables write them:
// 1.3k would hide what 1,301 says in four characters.
func format(v float64) string {
	a := round3(math.Abs(v))
	switch {
	case a >= 1e6:
		return sig3(v/1e6) + "M"
	case a >= 1e4:
		return sig3(v/1e3) + "k"
	case math.Abs(v) >= 999.5:
		return chart.Thousands(int(math.Round(v)))
	}
	return sig3(v)
}

// round3 rounds x to three significant digits.
func round3(x float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	e := math.Pow(10, math.Floor(math.Log10(math.Abs(x)))-2)
	return math.Round(x/e) * e
}

func sig3(x float64) string {
	r := round3(x)
	if r == 0 {
		return "0"
	}
	d := max(0, 2-int(math.Floor(math.Log10(math.Abs(r)))))
	s := strconv.FormatFloat(r, 'f', d, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
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
