package sim

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// The charts' geometry: a header with the title and the legend, panels,
// and a footer.
const (
	headerH   = 0.85 * vg.Inch
	panelH    = 1.45 * vg.Inch
	footerH   = 0.15 * vg.Inch
	accuracyH = 2.6 * vg.Inch
	titleSize = 14
)

// legend is the simulator's legends' layout.
var legend = chart.Legend{Size: 10, Swatch: 0.28 * vg.Inch, Box: 4, Gap: 0.35 * vg.Inch}

// Colours: one per algorithm, the same in every chart.
var (
	algorithmColors = map[ratekeeper.Algorithm]color.Color{
		ratekeeper.TokenBucket:   chart.Blue,
		ratekeeper.LeakyBucket:   chart.Teal,
		ratekeeper.FixedWindow:   chart.Orange,
		ratekeeper.SlidingLog:    chart.Purple,
		ratekeeper.SlidingWindow: chart.Green,
	}
	pauseColor = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	rateStyle  = draw.LineStyle{Color: chart.Red, Width: 1.6}
	edgeStyle  = draw.LineStyle{Color: color.RGBA{0x88, 0x88, 0x88, 0xff}, Width: 0.8, Dashes: []vg.Length{3, 2}}
)

func colorOf(a ratekeeper.Algorithm) color.Color {
	if c, ok := algorithmColors[a]; ok {
		return c
	}
	return chart.Ink
}

// styleAxes gives p the charts' fonts, round ticks and a light grid.
func styleAxes(p *plot.Plot) {
	chart.StyleAxes(p, chart.Ticks{Format: tickLabel}, true)
}

// tickLabel writes a tick's value: whole numbers with commas where the
// step is whole, else as short as it reads exactly.
func tickLabel(v, step, _ float64) string {
	if step >= 1 && v == math.Trunc(v) {
		return chart.Thousands(int(v))
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// trimFloat writes x without a needless fraction: 100, 2.5.
func trimFloat(x float64) string {
	if x == math.Trunc(x) {
		return chart.Thousands(int(x))
	}
	return fmt.Sprintf("%.3g", x)
}

// drawTitle writes a chart's name in bold and its description after it.
func drawTitle(c draw.Canvas, name, desc string) {
	const pad = 0.2 * vg.Inch
	bold := chart.Align(chart.Sans(titleSize, true), draw.XLeft, draw.YTop)
	plain := chart.Align(chart.Sans(titleSize-2.5, false), draw.XLeft, draw.YTop)
	x, y := c.Min.X+pad, c.Max.Y-pad
	c.FillText(bold, vg.Point{X: x, Y: y}, name)
	c.FillText(plain, vg.Point{X: x + bold.Width(name) + pad, Y: y - 2}, desc)
}

// edgeMark is the legend's swatch for the fixed windows' edges.
func edgeMark(c draw.Canvas, x0, x1, y vg.Length) {
	m := (x0 + x1) / 2
	c.StrokeLine2(edgeStyle, m, y-6, m, y+6)
}

// alignPanels stacks plots in c, one per row, sharing their axes' room.
func alignPanels(c draw.Canvas, plots []*plot.Plot, tiles draw.Tiles) {
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles.Rows, tiles.Cols = len(plots), 1
	canvases := plot.Align(rows, tiles, c)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
}

// newPanel is a panel of a stack, titled title, over x from 0 to xmax and
// y from 0 to ymax. The last panel of a stack has the time axis's label.
func newPanel(title, ylabel string, xmax, ymax float64, last bool) *plot.Plot {
	p := plot.New()
	styleAxes(p)
	p.Title.Text = title
	p.Title.Padding = 3
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min, p.Y.Max = 0, ymax
	p.Y.Label.Text = ylabel
	if last {
		p.X.Label.Text = "time (s)"
	}
	return p
}

func (r *Result) chartHeight() vg.Length {
	if r.Config.Kind == KindTraffic {
		return headerH + 2*accuracyH + footerH
	}
	return headerH + vg.Length(len(r.Outcomes))*panelH + footerH
}

func (r *Result) draw(dc draw.Canvas) error {
	header, body := chart.Layout(dc, headerH, footerH)
	drawTitle(header, r.Config.Name, r.Config.String())
	if r.Config.Kind == KindTraffic {
		r.drawAccuracyLegend(header)
		return r.drawAccuracy(body)
	}
	r.drawLegend(header)
	r.drawPanels(body)
	return nil
}

// drawLegend writes the legend under the title.
func (r *Result) drawLegend(c draw.Canvas) {
	cfg := r.Config
	entries := []chart.Entry{
		chart.Box(chart.Ink, fmt.Sprintf("items done per %v", cfg.Tick)),
		chart.Line(rateStyle, fmt.Sprintf("the limit: %s per %v (%s)", trimFloat(cfg.perTick()), cfg.Tick, rateString(cfg.Rate, cfg.Period))),
	}
	if r.showEdges() {
		entries = append(entries, chart.Entry{Text: "fixed windows' edges", Mark: edgeMark})
	}
	if len(cfg.Pauses) > 0 {
		entries = append(entries, chart.Box(pauseColor, "worker paused"))
	}
	legend.Draw(c, c.Min.X+0.2*vg.Inch, c.Max.Y-0.6*vg.Inch, entries)
}

// showEdges says whether the panels mark the fixed windows' edges: when
// there are few enough to see.
func (r *Result) showEdges() bool {
	return time.Duration(r.Ticks)*r.Config.Tick <= 40*r.Config.Period
}

// drawPanels draws one panel per algorithm, stacked, sharing both axes.
func (r *Result) drawPanels(c draw.Canvas) {
	cfg := r.Config
	ymax := cfg.perTick() * 1.5
	for _, o := range r.Outcomes {
		ymax = max(ymax, float64(slices.Max(o.Counts))*1.12)
	}
	plots := make([]*plot.Plot, len(r.Outcomes))
	for i, o := range r.Outcomes {
		plots[i] = r.panel(o, ymax, i == len(r.Outcomes)-1)
	}
	alignPanels(c, plots, draw.Tiles{PadX: 0, PadY: 0.12 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: 0.3 * vg.Inch})
}

// panel is outcome o's panel, up to ymax; the last one has the time axis's
// label.
func (r *Result) panel(o Outcome, ymax float64, last bool) *plot.Plot {
	cfg := r.Config
	tick := cfg.Tick.Seconds()
	end := float64(r.Ticks) * tick
	s := o.Summary
	title := fmt.Sprintf("%s: done in %.3f s · at most %s per tick, %s in any %v",
		o.Algorithm, s.SecondsToFinish, chart.Thousands(s.MaxPerTick), chart.Thousands(s.MaxPerWindow), cfg.Period)
	if s.ItemsLost > 0 {
		title += fmt.Sprintf(" · %s LOST", chart.Thousands(s.ItemsLost))
	}
	p := newPanel(title, "per "+cfg.Tick.String(), end, ymax, last)
	pauses := make([][2]float64, len(cfg.Pauses))
	for i, ps := range cfg.Pauses {
		pauses[i] = [2]float64{ps.At.Seconds(), ps.end().Seconds()}
	}
	p.Add(&chart.Spans{Spans: pauses, Color: pauseColor})
	p.Add(&chart.Bars{Counts: o.Counts, Width: tick, Color: colorOf(o.Algorithm)})
	if r.showEdges() {
		p.Add(&chart.Edges{Every: cfg.Period.Seconds(), End: end, Style: edgeStyle})
	}
	p.Add(&chart.HLine{Y: cfg.perTick(), Style: rateStyle})
	return p
}

// drawAccuracyLegend writes what the accuracy chart judges, under the
// title.
func (r *Result) drawAccuracyLegend(c draw.Canvas) {
	legend.Draw(c, c.Min.X+0.2*vg.Inch, c.Max.Y-0.6*vg.Inch, []chart.Entry{
		chart.Box(allowedColor, "wrongly allowed: the exact sliding log would have refused"),
		chart.Box(deniedColor, "wrongly denied: it would have allowed"),
		chart.Line(rateStyle, "the limit"),
	})
}

// The accuracy chart's colours.
var (
	allowedColor = chart.Red
	deniedColor  = chart.Blue
)

// drawAccuracy draws two panels: the share of wrong decisions per
// algorithm, and the busiest window as a share of the limit.
func (r *Result) drawAccuracy(c draw.Canvas) error {
	p1, err := r.wrongPanel()
	if err != nil {
		return err
	}
	p2, err := r.busiestPanel()
	if err != nil {
		return err
	}
	alignPanels(c, []*plot.Plot{p1, p2}, draw.Tiles{PadY: 0.25 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: 0.3 * vg.Inch})
	return nil
}

// barWidth is the accuracy chart's bars' width.
const barWidth = 26

// names are the algorithms' names, in order.
func (r *Result) names() []string {
	names := make([]string, len(r.Outcomes))
	for i, o := range r.Outcomes {
		names[i] = string(o.Algorithm)
	}
	return names
}

// wrongPanel is the share of wrong decisions per algorithm: wrongly
// allowed and wrongly denied side by side.
func (r *Result) wrongPanel() (*plot.Plot, error) {
	cfg := r.Config
	n := len(r.Outcomes)
	allowed := make(plotter.Values, n)
	denied := make(plotter.Values, n)
	for i, o := range r.Outcomes {
		allowed[i] = *o.Summary.WronglyAllowedPct
		denied[i] = *o.Summary.WronglyDeniedPct
	}
	p := plot.New()
	styleAxes(p)
	p.Title.Text = fmt.Sprintf("wrong decisions, %% of all %s requests (the exact log allows at most %s in any %v)", chart.Thousands(r.Outcomes[0].Summary.Items), chart.Thousands(cfg.Rate), cfg.Period)
	p.Title.TextStyle.Font.Size = chart.PlotTitleSize + 1
	p.Y.Label.Text = "% of requests"
	w := vg.Points(barWidth)
	for _, side := range []struct {
		vs  plotter.Values
		clr color.Color
		dx  vg.Length
	}{{allowed, allowedColor, -w/2 - 1}, {denied, deniedColor, w/2 + 1}} {
		b, err := plotter.NewBarChart(side.vs, w)
		if err != nil {
			return nil, err
		}
		b.Color, b.LineStyle.Width, b.Offset = side.clr, 0, side.dx
		p.Add(b)
	}
	p.NominalX(r.names()...)
	p.Y.Min, p.Y.Max = 0, max(1, slices.Max(allowed), slices.Max(denied))*1.25
	if err := addLabels(p, allowed, -w/2-1, percents(allowed)); err != nil {
		return nil, err
	}
	return p, addLabels(p, denied, w/2+1, percents(denied))
}

// percents writes vs as "1.23%".
func percents(vs plotter.Values) []string {
	labels := make([]string, len(vs))
	for i, v := range vs {
		labels[i] = fmt.Sprintf("%.2f%%", v)
	}
	return labels
}

// busiestPanel is the busiest window for one client per algorithm, as a
// share of the limit.
func (r *Result) busiestPanel() (*plot.Plot, error) {
	cfg := r.Config
	n := len(r.Outcomes)
	window := make(plotter.Values, n)
	labels := make([]string, n)
	p := plot.New()
	styleAxes(p)
	p.Title.Text = fmt.Sprintf("busiest %v for one client, %% of the limit (%s)", cfg.Period, chart.Thousands(cfg.Rate))
	p.Title.TextStyle.Font.Size = chart.PlotTitleSize + 1
	p.Y.Label.Text = "% of the limit"
	w := vg.Points(barWidth)
	for i, o := range r.Outcomes {
		window[i] = 100 * float64(o.Summary.MaxPerWindow) / float64(cfg.Rate)
		labels[i] = fmt.Sprintf("%s (%.0f%%)", chart.Thousands(o.Summary.MaxPerWindow), window[i])
		v := make(plotter.Values, n)
		v[i] = window[i]
		b, err := plotter.NewBarChart(v, 2*w)
		if err != nil {
			return nil, err
		}
		b.Color, b.LineStyle.Width = colorOf(o.Algorithm), 0
		p.Add(b)
	}
	p.NominalX(r.names()...)
	p.Y.Min, p.Y.Max = 0, max(120, slices.Max(window)*1.2)
	p.Add(&chart.HLine{Y: 100, Style: rateStyle, Extend: w})
	return p, addLabels(p, window, 0, labels)
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
		l.TextStyle[i] = chart.Align(chart.Sans(chart.TickSize, false), draw.XCenter, draw.YBottom)
	}
	l.Offset = vg.Point{X: dx, Y: 2}
	p.Add(l)
	return nil
}
