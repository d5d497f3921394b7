package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Geometry and type, as in the simulator's charts (sim/chart.go): 8.5 in
// across at 120 dpi is 1020 pixels, sharp on a documentation page.
const (
	chartWidth   = 8.5 * vg.Inch
	plotHeight   = 3.4 * vg.Inch
	chartDPI     = 120
	margin       = 0.2 * vg.Inch
	titleSize    = 13
	subtitleSize = 9.5
	legendSize   = 9.5
	labelSize    = 10
	tickSize     = 9
	valueSize    = 8
	legendRowH   = 16
)

// palette holds the series' colours: the simulator's colours first, then
// others far enough from them and from each other to tell apart.
var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, // blue
	color.RGBA{0xe6, 0x7e, 0x22, 0xff}, // orange
	color.RGBA{0x2e, 0x9d, 0x4a, 0xff}, // green
	color.RGBA{0x8e, 0x44, 0xad, 0xff}, // purple
	color.RGBA{0x17, 0x9c, 0x9c, 0xff}, // teal
	color.RGBA{0x8c, 0x56, 0x4b, 0xff}, // brown
	color.RGBA{0xd6, 0x60, 0x9f, 0xff}, // pink
	color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, // grey
	color.RGBA{0xb5, 0xb5, 0x2a, 0xff}, // olive
	color.RGBA{0x2c, 0x3e, 0x50, 0xff}, // navy
}

var (
	inkColor    = color.RGBA{0x33, 0x33, 0x33, 0xff}
	gridColor   = color.RGBA{0xe8, 0xe8, 0xe8, 0xff}
	targetStyle = draw.LineStyle{Color: color.RGBA{0xd6, 0x27, 0x28, 0xff}, Width: 1.6, Dashes: []vg.Length{6, 3}}
)

// colours gives each series a colour of its own: the one at its place in
// order (-order) when there is one, so that a contender keeps its colour
// across the charts drawn with the same order, even where some are left
// out (-minus); else at its place in series. More series than colours is
// an error rather than two series in one colour.
func colours(series, order []string) ([]color.Color, error) {
	cs := make([]color.Color, len(series))
	for i, s := range series {
		k := i
		if order != nil {
			k = index(order, s)
		}
		if k >= len(palette) {
			return nil, fmt.Errorf("series %s is number %d and there are %d colours: draw fewer series (-order)", s, k+1, len(palette))
		}
		cs[i] = palette[k]
	}
	return cs, nil
}

// chart is a table ready to draw.
type chart struct {
	c      config
	t      *table
	colors []color.Color
	names  map[string]string
}

func newChart(t *table, c config) (*chart, error) {
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
	return &chart{c: c, t: t, colors: colors, names: names}, nil
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

func (ch *chart) name(v string) string {
	if n, ok := ch.names[v]; ok {
		return n
	}
	return v
}

// single says whether the chart has one group: then the series stand side
// by side along the x axis, each named under its bar.
func (ch *chart) single() bool { return len(ch.t.groups) == 1 && ch.t.groups[0] == "" }

// legendEntry is a swatch (a box in a series' colour, or a line) and its text.
type legendEntry struct {
	color color.Color
	line  *draw.LineStyle
	text  string
}

// legend names every series, in its colour, and the target line.
func (ch *chart) legend() []legendEntry {
	var es []legendEntry
	for i, s := range ch.t.series {
		es = append(es, legendEntry{color: ch.colors[i], text: ch.name(s)})
	}
	if ch.c.target != 0 {
		es = append(es, legendEntry{line: &targetStyle, text: ch.c.targetLabel})
	}
	return es
}

const swatchW = 0.25 * vg.Inch

// legendRows lays the entries out in rows no wider than w.
func legendRows(es []legendEntry, w vg.Length) [][]legendEntry {
	st := sans(legendSize, false)
	var rows [][]legendEntry
	var x vg.Length
	for _, e := range es {
		ew := swatchW + 5 + st.Width(e.text)
		if len(rows) == 0 || x > 0 && x+ew > w {
			rows = append(rows, nil)
			x = 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], e)
		x += ew + 0.3*vg.Inch
	}
	return rows
}

// headerHeight is the room above the plot for the title, the subtitle and
// the legend's rows.
func (ch *chart) headerHeight() vg.Length {
	h := margin + titleSize*1.2
	if ch.c.subtitle != "" {
		h += subtitleSize*1.2 + 3
	}
	h += 6 + vg.Length(len(legendRows(ch.legend(), chartWidth-2*margin)))*legendRowH
	return h + 4
}

func (ch *chart) save(path string) error {
	w, h := chartWidth, ch.headerHeight()+plotHeight
	var (
		cv vg.CanvasWriterTo
		dc draw.Canvas
	)
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))
		cv, dc = vgimg.PngCanvas{Canvas: c}, draw.New(c)
	case ".svg":
		c := vgsvg.New(w, h)
		cv, dc = c, draw.New(c)
	default:
		return fmt.Errorf("%s: write .png or .svg", path)
	}
	if err := ch.draw(dc); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := cv.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

func (ch *chart) draw(dc draw.Canvas) error {
	dc.FillPolygon(color.White, rect(dc.Min.X, dc.Min.Y, dc.Max.X, dc.Max.Y))
	hh := ch.headerHeight()
	ch.drawHeader(dc)
	body := dc
	body.Max.Y -= hh
	body.Min.X += 0.15 * vg.Inch
	body.Max.X -= 0.3 * vg.Inch
	body.Min.Y += 0.1 * vg.Inch
	p, err := ch.plot(body)
	if err != nil {
		return err
	}
	p.Draw(body)
	return nil
}

// drawHeader writes the title, the subtitle under it and the legend's
// rows under them: above the plot, never over it.
func (ch *chart) drawHeader(c draw.Canvas) {
	x, y := c.Min.X+margin, c.Max.Y-margin
	c.FillText(withAlign(sans(titleSize, true), draw.XLeft, draw.YTop), vg.Point{X: x, Y: y}, ch.c.title)
	y -= titleSize * 1.2
	if ch.c.subtitle != "" {
		y -= 3
		c.FillText(withAlign(sans(subtitleSize, false), draw.XLeft, draw.YTop), vg.Point{X: x, Y: y}, ch.c.subtitle)
		y -= subtitleSize * 1.2
	}
	y -= 6 + legendRowH/2
	st := withAlign(sans(legendSize, false), draw.XLeft, draw.YCenter)
	for _, row := range legendRows(ch.legend(), chartWidth-2*margin) {
		lx := x
		for _, e := range row {
			if e.line != nil {
				c.StrokeLine2(*e.line, lx, y, lx+swatchW, y)
			} else {
				c.FillPolygon(e.color, rect(lx, y-5, lx+swatchW, y+5))
			}
			lx += swatchW + 5
			c.FillText(st, vg.Point{X: lx, Y: y}, e.text)
			lx += st.Width(e.text) + 0.3*vg.Inch
		}
		y -= legendRowH
	}
}

// plot builds the bars, their values and the axes for the canvas c.
func (ch *chart) plot(c draw.Canvas) (*plot.Plot, error) {
	t := ch.t
	p := plot.New()
	styleAxes(p)
	p.Y.Label.Text = ch.c.ylabel
	if p.Y.Label.Text == "" {
		p.Y.Label.Text = label(ch.c.metric)
	}
	p.X.Label.Text = ch.c.xlabel

	slots, perSlot := len(t.groups), len(t.series)
	var ticks []string
	if ch.single() {
		slots, perSlot = len(t.series), 1
		for _, s := range t.series {
			ticks = append(ticks, ch.name(s))
		}
	} else {
		for _, g := range t.groups {
			if ch.c.xlabel == "" {
				ticks = append(ticks, ch.c.group+"="+ch.name(g))
			} else {
				ticks = append(ticks, ch.name(g))
			}
		}
	}
	p.NominalX(ticks...)
	p.X.Min, p.X.Max = -0.5, float64(slots)-0.5

	lo, top := 0.0, 0.0
	for _, g := range t.groups {
		for _, v := range t.values[g] {
			lo, top = min(lo, v), max(top, v)
		}
	}
	top = max(top, ch.c.target)
	if top == lo {
		top = lo + 1
	}
	p.Y.Min, p.Y.Max = lo, top

	// Bar widths from the data area's width: bars fill 80% of a group's
	// slot (60% of a lone bar's), with a point between neighbours.
	da := p.DataCanvas(c)
	slotW := da.Rectangle.Size().X / vg.Length(slots)
	barW := slotW * 0.8 / vg.Length(perSlot)
	if ch.single() {
		barW = slotW * 0.6
	}

	var bs bars
	var ls valueLabels
	st := sans(valueSize, false)
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
	ls.style = valueStyle(st, ls.texts, barW)
	// Room above the tallest bar for its value: e points of the data
	// area's height da.Y.
	e := ls.extent() + 6
	if h := da.Rectangle.Size().Y; e < h/2 {
		p.Y.Max = (top - float64(e/h)*lo) / (1 - float64(e/h))
	}

	if ch.c.target != 0 {
		p.Add(&hline{y: ch.c.target, style: targetStyle})
	}
	p.Add(bs, &ls)
	return p, nil
}

// valueStyle writes the values level above their bars when the widest
// fits a bar's width, else turned to read upwards.
func valueStyle(st text.Style, texts []string, barW vg.Length) text.Style {
	widest := vg.Length(0)
	for _, s := range texts {
		widest = max(widest, st.Width(s))
	}
	if widest <= barW-3 { // a gap of 2 points at least between neighbours
		return withAlign(st, draw.XCenter, draw.YBottom)
	}
	st = withAlign(st, draw.XLeft, draw.YCenter)
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
		c.FillPolygon(b.color, c.ClipPolygonXY(rect(x0, y(0), x0+b.w, y(b.v))))
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

// hline draws a horizontal line across the data area at y.
type hline struct {
	y     float64
	style draw.LineStyle
}

func (h *hline) Plot(c draw.Canvas, p *plot.Plot) {
	_, y := p.Transforms(&c)
	c.StrokeLine2(h.style, c.Min.X, y(h.y), c.Max.X, y(h.y))
}

// styleAxes gives p the charts' fonts, round ticks and a light horizontal
// grid.
func styleAxes(p *plot.Plot) {
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = sans(labelSize, false).Font
		a.Label.TextStyle.Color = inkColor
		a.Tick.Label.Font = sans(tickSize, false).Font
		a.Tick.Label.Color = inkColor
		a.Color = inkColor
		a.Tick.Color = inkColor
		a.Tick.Length = 4
		a.Padding = 0
	}
	p.Y.Tick.Marker = niceTicks{}
	g := plotter.NewGrid()
	g.Vertical.Color = nil
	g.Horizontal.Color = gridColor
	p.Add(g)
}

// niceTicks marks an axis at round steps (1, 2 or 5 times a power of
// ten), about eight of them at most, labelled by formatTick.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: formatTick(lo, 1, lo)}}
	}
	raw := (hi - lo) / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ts []plot.Tick
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+step*1e-9; i++ {
		v := i * step
		if v == 0 {
			v = 0 // not -0
		}
		ts = append(ts, plot.Tick{Value: v, Label: formatTick(v, step, max(math.Abs(lo), math.Abs(hi)))})
	}
	return ts
}

// formatTick writes a tick's value v on an axis marked every step up to
// top: 250k and 1.5M where the axis reaches 10,000 and the step is a
// thousand or more, 2,500 where the step is whole, else with the step's
// decimals (0.25, 0.5): never 75000.00. Below 10,000 the ticks are whole
// numbers, as the values on the bars are.
func formatTick(v, step, top float64) string {
	switch {
	case v == 0:
		return "0"
	case step >= 1000 && top >= 1e4 && math.Abs(v) >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case step >= 1000 && top >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case step >= 1:
		return thousands(int64(math.Round(v)))
	}
	d := 0
	for s := step; math.Abs(s-math.Round(s)) > 1e-9*step && d < 12; s *= 10 {
		d++
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// format writes a bar's value to three significant digits, in thousands
// (41.2k) or millions (2.65M) when it is that large, without trailing
// zeros; from 1,000 to 9,999 whole, as the docs' tables write them (1.3k
// would hide what 1,301 says in four characters).
func format(v float64) string {
	a := round3(math.Abs(v))
	switch {
	case a >= 1e6:
		return sig3(v/1e6) + "M"
	case a >= 1e4:
		return sig3(v/1e3) + "k"
	case math.Abs(v) >= 999.5:
		return thousands(int64(math.Round(v)))
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

// sans is Liberation Sans at size points, optionally bold.
func sans(size vg.Length, bold bool) text.Style {
	f := font.Font{Typeface: "Liberation", Variant: "Sans"}
	if bold {
		f.Weight = xfont.WeightBold
	}
	return text.Style{Color: inkColor, Font: font.From(f, size), Handler: plot.DefaultTextHandler}
}

func withAlign(s text.Style, x text.XAlignment, y text.YAlignment) text.Style {
	s.XAlign, s.YAlign = x, y
	return s
}

func rect(x0, y0, x1, y1 vg.Length) []vg.Point {
	return []vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}}
}
