package sim

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/ratekeeper/ratekeeper"
)

// Chart geometry. PNGs are drawn at chartDPI: 8.5 in × 120 dpi is 1020
// pixels across, sharp on a documentation page.
const (
	chartWidth  = 8.5 * vg.Inch
	chartDPI    = 120
	headerH     = 0.85 * vg.Inch
	panelH      = 1.45 * vg.Inch
	footerH     = 0.15 * vg.Inch
	accuracyH   = 2.6 * vg.Inch
	titleSize   = 14
	labelSize   = 10
	tickSize    = 9
	legendSize  = 10
	summarySize = 9.5
)

// Colours: one per algorithm, the same in every chart.
var (
	algorithmColors = map[ratekeeper.Algorithm]color.Color{
		ratekeeper.TokenBucket:   color.RGBA{0x1f, 0x77, 0xb4, 0xff},
		ratekeeper.LeakyBucket:   color.RGBA{0x17, 0x9c, 0x9c, 0xff},
		ratekeeper.FixedWindow:   color.RGBA{0xe6, 0x7e, 0x22, 0xff},
		ratekeeper.SlidingLog:    color.RGBA{0x8e, 0x44, 0xad, 0xff},
		ratekeeper.SlidingWindow: color.RGBA{0x2e, 0x9d, 0x4a, 0xff},
	}
	rateColor    = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	pauseColor   = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	allowedColor = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	deniedColor  = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	inkColor     = color.RGBA{0x33, 0x33, 0x33, 0xff}
	rateStyle    = draw.LineStyle{Color: rateColor, Width: 1.6}
	edgeStyle    = draw.LineStyle{Color: color.RGBA{0x88, 0x88, 0x88, 0xff}, Width: 0.8, Dashes: []vg.Length{3, 2}}
)

func colorOf(a ratekeeper.Algorithm) color.Color {
	if c, ok := algorithmColors[a]; ok {
		return c
	}
	return inkColor
}

// sans is Liberation Sans at size points, optionally bold.
func sans(size vg.Length, bold bool) text.Style {
	f := font.Font{Typeface: "Liberation", Variant: "Sans"}
	if bold {
		f.Weight = xfont.WeightBold
	}
	return text.Style{
		Color:   inkColor,
		Font:    font.From(f, size),
		Handler: plot.DefaultTextHandler,
	}
}

// WriteFiles writes DIR/NAME.csv, DIR/NAME.svg and DIR/NAME.png, creating
// dir if need be.
func (r *Result) WriteFiles(dir string) error {
	return writeFiles(dir, r.Config.Name, r.WriteCSV, r.WriteSVG, r.WritePNG)
}

// writeFiles writes DIR/NAME.csv, DIR/NAME.svg and DIR/NAME.png with the
// functions given, creating dir if need be.
func writeFiles(dir, name string, csv, svg, png func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, name)
	for _, f := range []struct {
		ext   string
		write func(io.Writer) error
	}{{".csv", csv}, {".svg", svg}, {".png", png}} {
		if err := writeFile(base+f.ext, f.write); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}

// WriteSVG draws the chart as SVG. The text names Liberation Sans, which
// the layout was measured with, and then its metric twins Arial and
// Helvetica for viewers without it.
func (r *Result) WriteSVG(w io.Writer) error {
	width, height := r.chartSize()
	return writeSVG(w, width, height, r.draw)
}

// WritePNG draws the chart as PNG.
func (r *Result) WritePNG(w io.Writer) error {
	width, height := r.chartSize()
	return writePNG(w, width, height, r.draw)
}

// writeSVG draws a chart of the given size with drawChart as SVG, naming
// the fonts (svgFonts).
func writeSVG(w io.Writer, width, height vg.Length, drawChart func(draw.Canvas) error) error {
	c := vgsvg.New(width, height)
	if err := drawChart(draw.New(c)); err != nil {
		return err
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return err
	}
	_, err := w.Write(svgFonts(b.Bytes()))
	return err
}

// writePNG draws a chart of the given size with drawChart as PNG.
func writePNG(w io.Writer, width, height vg.Length, drawChart func(draw.Canvas) error) error {
	c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))
	if err := drawChart(draw.New(c)); err != nil {
		return err
	}
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

func (r *Result) chartSize() (vg.Length, vg.Length) {
	if r.Config.Kind == KindTraffic {
		return chartWidth, headerH + 2*accuracyH + footerH
	}
	return chartWidth, headerH + vg.Length(len(r.Outcomes))*panelH + footerH
}

func (r *Result) draw(dc draw.Canvas) error {
	dc.FillPolygon(color.White, rect(dc.Min.X, dc.Min.Y, dc.Max.X, dc.Max.Y))
	top := dc.Max.Y
	header := dc
	header.Min.Y = top - headerH
	body := dc
	body.Max.Y = top - headerH
	body.Min.Y += footerH
	if r.Config.Kind == KindTraffic {
		r.drawAccuracyHeader(header)
		return r.drawAccuracy(body)
	}
	r.drawHeader(header)
	return r.drawPanels(body)
}

// drawTitle writes the scenario's name in bold and its description after it.
func (r *Result) drawTitle(c draw.Canvas) {
	const pad = 0.2 * vg.Inch
	name := withAlign(sans(titleSize, true), draw.XLeft, draw.YTop)
	desc := withAlign(sans(titleSize-2.5, false), draw.XLeft, draw.YTop)
	x, y := c.Min.X+pad, c.Max.Y-pad
	c.FillText(name, vg.Point{X: x, Y: y}, r.Config.Name)
	x += name.Width(r.Config.Name) + 0.2*vg.Inch
	c.FillText(desc, vg.Point{X: x, Y: y - 2}, r.Config.String())
}

// legend draws entries in a row from x at height y: each a swatch drawn by
// its function, then its text.
type legendEntry struct {
	swatch func(c draw.Canvas, x0, x1, y vg.Length)
	text   string
}

func drawLegend(c draw.Canvas, x, y vg.Length, entries []legendEntry) {
	st := withAlign(sans(legendSize, false), draw.XLeft, draw.YCenter)
	const sw = 0.28 * vg.Inch
	for _, e := range entries {
		e.swatch(c, x, x+sw, y)
		x += sw + 5
		c.FillText(st, vg.Point{X: x, Y: y}, e.text)
		x += st.Width(e.text) + 0.35*vg.Inch
	}
}

func boxSwatch(clr color.Color) func(c draw.Canvas, x0, x1, y vg.Length) {
	return func(c draw.Canvas, x0, x1, y vg.Length) { c.FillPolygon(clr, rect(x0, y-4, x1, y+4)) }
}

func lineSwatch(sty draw.LineStyle) func(c draw.Canvas, x0, x1, y vg.Length) {
	return func(c draw.Canvas, x0, x1, y vg.Length) { c.StrokeLine2(sty, x0, y, x1, y) }
}

func edgeSwatch(c draw.Canvas, x0, x1, y vg.Length) {
	m := (x0 + x1) / 2
	c.StrokeLine2(edgeStyle, m, y-6, m, y+6)
}

// drawHeader writes the title and, on the line below, the legend.
func (r *Result) drawHeader(c draw.Canvas) {
	cfg := r.Config
	r.drawTitle(c)
	entries := []legendEntry{
		{boxSwatch(inkColor), fmt.Sprintf("items done per %v", cfg.Tick)},
		{lineSwatch(rateStyle), fmt.Sprintf("the limit: %s per %v (%s)", trimFloat(cfg.perTick()), cfg.Tick, rateString(cfg.Rate, cfg.Period))},
	}
	if r.showEdges() {
		entries = append(entries, legendEntry{edgeSwatch, "fixed windows' edges"})
	}
	if len(cfg.Pauses) > 0 {
		entries = append(entries, legendEntry{boxSwatch(pauseColor), "worker paused"})
	}
	drawLegend(c, c.Min.X+0.2*vg.Inch, c.Max.Y-0.6*vg.Inch, entries)
}

// showEdges says whether the panels mark the fixed windows' edges: when
// there are few enough to see.
func (r *Result) showEdges() bool {
	return time.Duration(r.Ticks)*r.Config.Tick <= 40*r.Config.Period
}

func withAlign(s text.Style, x text.XAlignment, y text.YAlignment) text.Style {
	s.XAlign, s.YAlign = x, y
	return s
}

func rect(x0, y0, x1, y1 vg.Length) []vg.Point {
	return []vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}}
}

// trimFloat writes x without a needless fraction: 100, 2.5.
func trimFloat(x float64) string {
	if x == math.Trunc(x) {
		return thousands(int(x))
	}
	return fmt.Sprintf("%.3g", x)
}

// drawPanels draws one panel per algorithm, stacked, sharing both axes.
func (r *Result) drawPanels(c draw.Canvas) error {
	cfg := r.Config
	tick := cfg.Tick.Seconds()
	end := float64(r.Ticks) * tick
	ymax := cfg.perTick() * 1.5
	for _, o := range r.Outcomes {
		ymax = max(ymax, float64(slices.Max(o.Counts))*1.12)
	}
	plots := make([][]*plot.Plot, len(r.Outcomes))
	for i, o := range r.Outcomes {
		p := plot.New()
		styleAxes(p)
		s := o.Summary
		p.Title.Text = fmt.Sprintf("%s: done in %.3f s · at most %s per tick, %s in any %v",
			o.Algorithm, s.SecondsToFinish, thousands(s.MaxPerTick), thousands(s.MaxPerWindow), cfg.Period)
		if s.ItemsLost > 0 {
			p.Title.Text += fmt.Sprintf(" · %s LOST", thousands(s.ItemsLost))
		}
		p.Title.Padding = 3
		p.X.Min, p.X.Max = 0, end
		p.Y.Min, p.Y.Max = 0, ymax
		p.Y.Label.Text = "per " + cfg.Tick.String()
		if i == len(r.Outcomes)-1 {
			p.X.Label.Text = "time (s)"
		}
		p.Add(&shade{pauses: cfg.Pauses})
		p.Add(&bars{counts: o.Counts, width: tick, color: colorOf(o.Algorithm)})
		if r.showEdges() {
			p.Add(&edges{every: cfg.Period.Seconds(), end: end})
		}
		p.Add(&hline{y: cfg.perTick(), style: rateStyle})
		plots[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: 0, PadY: 0.12 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: 0.3 * vg.Inch}
	canvases := plot.Align(plots, tiles, c)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	return nil
}

// styleAxes gives p the charts' fonts, tidy ticks and a light grid.
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
		a.Tick.Marker = niceTicks{}
	}
	p.Title.TextStyle = sans(summarySize, true)
	p.Title.TextStyle.XAlign, p.Title.TextStyle.YAlign = draw.XCenter, draw.YTop
	g := plotter.NewGrid()
	g.Vertical.Color = color.RGBA{0xe8, 0xe8, 0xe8, 0xff}
	g.Horizontal.Color = color.RGBA{0xe8, 0xe8, 0xe8, 0xff}
	p.Add(g)
}

// niceTicks marks an axis at round steps (1, 2, 2.5 or 5 times a power of
// ten), about eight of them at most, with no minor ticks.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: formatTick(lo, 1)}}
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
		ts = append(ts, plot.Tick{Value: v, Label: formatTick(v, step)})
	}
	return ts
}

func formatTick(v, step float64) string {
	if step >= 1 && v == math.Trunc(v) {
		return thousands(int(v))
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// bars draws one bar per tick, from 0 to the count.
type bars struct {
	counts []int
	width  float64 // of a tick, in seconds
	color  color.Color
}

func (b *bars) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	gap := vg.Length(0)
	if w := x(b.width) - x(0); w > 3 {
		gap = min(w*0.12, 2)
	}
	for i, n := range b.counts {
		if n == 0 {
			continue
		}
		x0, x1 := x(float64(i)*b.width)+gap/2, x(float64(i+1)*b.width)-gap/2
		c.FillPolygon(b.color, c.ClipPolygonXY(rect(x0, y(0), x1, y(float64(n)))))
	}
}

// hline draws a horizontal line across the plot at y.
type hline struct {
	y      float64
	style  draw.LineStyle
	extend vg.Length // beyond the data area on both sides
}

func (h *hline) Plot(c draw.Canvas, p *plot.Plot) {
	_, y := p.Transforms(&c)
	c.StrokeLine2(h.style, c.Min.X-h.extend, y(h.y), c.Max.X+h.extend, y(h.y))
}

// edges draws a dashed vertical line at every multiple of every.
type edges struct{ every, end float64 }

func (e *edges) Plot(c draw.Canvas, p *plot.Plot) {
	x, _ := p.Transforms(&c)
	for i := 1; float64(i)*e.every < e.end; i++ {
		c.StrokeLine2(edgeStyle, x(float64(i)*e.every), c.Min.Y, x(float64(i)*e.every), c.Max.Y)
	}
}

// shade greys the pauses over the plot's full height.
type shade struct{ pauses []Pause }

func (s *shade) Plot(c draw.Canvas, p *plot.Plot) {
	x, _ := p.Transforms(&c)
	for _, ps := range s.pauses {
		x0, x1 := max(x(ps.At.Seconds()), c.Min.X), min(x(ps.end().Seconds()), c.Max.X)
		if x1 > x0 {
			c.FillPolygon(pauseColor, rect(x0, c.Min.Y, x1, c.Max.Y))
		}
	}
}

// drawAccuracyHeader writes the accuracy chart's title, what it judges
// and the legend.
func (r *Result) drawAccuracyHeader(c draw.Canvas) {
	r.drawTitle(c)
	drawLegend(c, c.Min.X+0.2*vg.Inch, c.Max.Y-0.6*vg.Inch, []legendEntry{
		{boxSwatch(allowedColor), "wrongly allowed: the exact sliding log would have refused"},
		{boxSwatch(deniedColor), "wrongly denied: it would have allowed"},
		{lineSwatch(rateStyle), "the limit"},
	})
}

// drawAccuracy draws two panels: the share of wrong decisions per
// algorithm, and the busiest window as a share of the limit.
func (r *Result) drawAccuracy(c draw.Canvas) error {
	cfg := r.Config
	n := len(r.Outcomes)
	names := make([]string, n)
	allowed := make(plotter.Values, n)
	denied := make(plotter.Values, n)
	window := make(plotter.Values, n)
	for i, o := range r.Outcomes {
		s := o.Summary
		names[i] = string(o.Algorithm)
		allowed[i] = *s.WronglyAllowedPct
		denied[i] = *s.WronglyDeniedPct
		window[i] = 100 * float64(s.MaxPerWindow) / float64(cfg.Rate)
	}

	// Wrong decisions.
	p1 := plot.New()
	styleAxes(p1)
	p1.Title.Text = fmt.Sprintf("wrong decisions, %% of all %s requests (the exact log allows at most %s in any %v)", thousands(r.Outcomes[0].Summary.Items), thousands(cfg.Rate), cfg.Period)
	p1.Title.TextStyle.Font.Size = summarySize + 1
	p1.Y.Label.Text = "% of requests"
	w := vg.Points(26)
	ba, err := plotter.NewBarChart(allowed, w)
	if err != nil {
		return err
	}
	ba.Color, ba.LineStyle.Width, ba.Offset = allowedColor, 0, -w/2-1
	bd, err := plotter.NewBarChart(denied, w)
	if err != nil {
		return err
	}
	bd.Color, bd.LineStyle.Width, bd.Offset = deniedColor, 0, w/2+1
	p1.Add(ba, bd)
	p1.NominalX(names...)
	p1.Y.Min, p1.Y.Max = 0, max(1, slices.Max(allowed), slices.Max(denied))*1.25
	if err := addValueLabels(p1, allowed, -w/2-1, "%.2f%%"); err != nil {
		return err
	}
	if err := addValueLabels(p1, denied, w/2+1, "%.2f%%"); err != nil {
		return err
	}

	// Busiest window.
	p2 := plot.New()
	styleAxes(p2)
	p2.Title.Text = fmt.Sprintf("busiest %v for one client, %% of the limit (%s)", cfg.Period, thousands(cfg.Rate))
	p2.Title.TextStyle.Font.Size = summarySize + 1
	p2.Y.Label.Text = "% of the limit"
	for i, o := range r.Outcomes {
		v := make(plotter.Values, n)
		v[i] = window[i]
		b, err := plotter.NewBarChart(v, 2*w)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = colorOf(o.Algorithm), 0
		p2.Add(b)
	}
	p2.NominalX(names...)
	p2.Y.Min, p2.Y.Max = 0, max(120, slices.Max(window)*1.2)
	p2.Add(&hline{y: 100, style: rateStyle, extend: w})
	labels := make([]string, n)
	for i, o := range r.Outcomes {
		labels[i] = fmt.Sprintf("%s (%.0f%%)", thousands(o.Summary.MaxPerWindow), window[i])
	}
	if err := addLabels(p2, window, 0, labels); err != nil {
		return err
	}

	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: 0.25 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: 0.3 * vg.Inch}
	plots := [][]*plot.Plot{{p1}, {p2}}
	canvases := plot.Align(plots, tiles, c)
	p1.Draw(canvases[0][0])
	p2.Draw(canvases[1][0])
	return nil
}

func addValueLabels(p *plot.Plot, vs plotter.Values, dx vg.Length, format string) error {
	labels := make([]string, len(vs))
	for i, v := range vs {
		labels[i] = fmt.Sprintf(format, v)
	}
	return addLabels(p, vs, dx, labels)
}

// addLabels writes labels just above the bars at x = 0, 1, 2... (shifted
// by dx) of heights vs.
func addLabels(p *plot.Plot, vs plotter.Values, dx vg.Length, labels []string) error {
	xys := make(plotter.XYs, len(vs))
	for i, v := range vs {
		xys[i] = plotter.XY{X: float64(i), Y: v}
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i] = withAlign(sans(tickSize, false), draw.XCenter, draw.YBottom)
	}
	l.Offset = vg.Point{X: dx, Y: 2}
	p.Add(l)
	return nil
}
