package sim

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratekeeper/ratekeeper/internal/shared"
)

// The shared chart's geometry: three panels (exact, sync, lease), with room
// on the right for the bounds' labels.
const (
	sharedHeaderH = 1.05 * vg.Inch
	sharedPanelH  = 1.9 * vg.Inch
	sharedRight   = 0.75 * vg.Inch
)

// Colours: one per sync period, the same in both modes; exact in grey.
var (
	periodColors = []color.Color{
		color.RGBA{0x1f, 0x77, 0xb4, 0xff},
		color.RGBA{0xe6, 0x7e, 0x22, 0xff},
		color.RGBA{0x2e, 0x9d, 0x4a, 0xff},
		color.RGBA{0x8e, 0x44, 0xad, 0xff},
		color.RGBA{0x17, 0x9c, 0x9c, 0xff},
		color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	}
	exactColor = color.RGBA{0x77, 0x77, 0x77, 0xff}
)

// boundStyle is sync's bound at the sync period of colour c.
func boundStyle(c color.Color) draw.LineStyle {
	return draw.LineStyle{Color: c, Width: 1.3, Dashes: []vg.Length{5, 3}}
}

// WriteFiles writes DIR/NAME.csv, DIR/NAME.svg and DIR/NAME.png, creating
// dir if need be.
func (r *SharedResult) WriteFiles(dir string) error {
	return writeFiles(dir, r.Config.Name, r.WriteCSV, r.WriteSVG, r.WritePNG)
}

// WriteSVG draws the chart as SVG, naming the fonts as Result.WriteSVG
// does.
func (r *SharedResult) WriteSVG(w io.Writer) error {
	width, height := r.chartSize()
	return writeSVG(w, width, height, r.draw)
}

// WritePNG draws the chart as PNG.
func (r *SharedResult) WritePNG(w io.Writer) error {
	width, height := r.chartSize()
	return writePNG(w, width, height, r.draw)
}

func (r *SharedResult) chartSize() (vg.Length, vg.Length) {
	return chartWidth, sharedHeaderH + 3*sharedPanelH + footerH
}

func (r *SharedResult) draw(dc draw.Canvas) error {
	dc.FillPolygon(color.White, rect(dc.Min.X, dc.Min.Y, dc.Max.X, dc.Max.Y))
	header := dc
	header.Min.Y = dc.Max.Y - sharedHeaderH
	body := dc
	body.Max.Y -= sharedHeaderH
	body.Min.Y += footerH
	r.drawHeader(header)
	return r.drawPanels(body)
}

// drawHeader writes the title and, on two lines below, the legend.
func (r *SharedResult) drawHeader(c draw.Canvas) {
	cfg := r.Config
	const pad = 0.2 * vg.Inch
	name := withAlign(sans(titleSize, true), draw.XLeft, draw.YTop)
	desc := withAlign(sans(titleSize-2.5, false), draw.XLeft, draw.YTop)
	x, y := c.Min.X+pad, c.Max.Y-pad
	c.FillText(name, vg.Point{X: x, Y: y}, cfg.Name)
	c.FillText(desc, vg.Point{X: x + name.Width(cfg.Name) + pad, Y: y - 2}, cfg.String())

	modes := []legendEntry{{boxSwatch(exactColor), "exact"}}
	for i, T := range cfg.SyncPeriods {
		modes = append(modes, legendEntry{boxSwatch(periodColors[i]), "T = " + T.String()})
	}
	modes = append(modes, legendEntry{lineSwatch(rateStyle), fmt.Sprintf("the limit L = %s", rateString(cfg.Rate, cfg.Period))})
	drawLegend(c, c.Min.X+pad, c.Max.Y-0.58*vg.Inch, modes)
	drawLegend(c, c.Min.X+pad, c.Max.Y-0.85*vg.Inch, []legendEntry{
		{lineSwatch(boundStyle(inkColor)), "sync's bound at each T: L + 2T × the other instances' rate, at most N·L (store round trips δ = 0)"},
	})
}

// drawPanels draws exact, sync and lease, stacked, sharing both axes.
func (r *SharedResult) drawPanels(c draw.Canvas) error {
	cfg := r.Config
	win := cfg.Period.Seconds()
	end := float64(cfg.Duration/cfg.Period) * win
	// The axis shows what was admitted and the bounds up to twice the
	// limit; a bound above that is marked at the top.
	L := float64(cfg.Rate)
	ymax := 1.5 * L
	for _, o := range r.Outcomes {
		ymax = max(ymax, float64(slices.Max(o.Admitted))*1.15)
		if o.Bound <= 2*L {
			ymax = max(ymax, o.Bound*1.08)
		}
	}
	var plots [][]*plot.Plot
	for i, m := range []shared.Mode{shared.Exact, shared.Sync, shared.Lease} {
		var group []SharedOutcome
		for _, o := range r.Outcomes {
			if o.mode == m {
				group = append(group, o)
			}
		}
		p := plot.New()
		styleAxes(p)
		p.Title.Text = r.panelTitle(m, group)
		p.Title.Padding = 3
		p.X.Min, p.X.Max = 0, end
		p.Y.Min, p.Y.Max = 0, ymax
		p.Y.Label.Text = "admitted per " + cfg.Period.String()
		if i == 2 {
			p.X.Label.Text = "time (s)"
		}
		g := &groupedBars{width: win}
		for _, o := range group {
			g.counts = append(g.counts, o.Admitted)
			g.colors = append(g.colors, r.colorOf(o))
		}
		p.Add(g, &edges{every: win, end: end}, &hline{y: float64(cfg.Rate), style: rateStyle})
		if m == shared.Sync {
			for _, o := range group {
				p.Add(&boundLine{y: o.Bound, style: boundStyle(r.colorOf(o)), label: boundLabel(o.Bound, len(cfg.Split), cfg.Rate)})
			}
		}
		plots = append(plots, []*plot.Plot{p})
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: 0.15 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: sharedRight}
	canvases := plot.Align(plots, tiles, c)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	return nil
}

// colorOf is an outcome's colour: its sync period's, or exact's.
func (r *SharedResult) colorOf(o SharedOutcome) color.Color {
	if i := slices.Index(r.Config.SyncPeriods, o.SyncPeriod); i >= 0 && o.mode != shared.Exact {
		return periodColors[i]
	}
	return exactColor
}

// panelTitle sums up a mode's outcomes, in the order of the sync periods:
// what a window admitted (least–most) and the calls to the store.
func (r *SharedResult) panelTitle(m shared.Mode, group []SharedOutcome) string {
	var periods, admitted, calls []string
	secs := r.Config.Duration.Seconds()
	for _, o := range group {
		s := o.Summary
		periods = append(periods, s.SyncPeriod)
		a := strconv.Itoa(s.MaxPerWindow)
		if s.MinPerWindow != s.MaxPerWindow {
			a = fmt.Sprintf("%d–%d", s.MinPerWindow, s.MaxPerWindow)
		}
		admitted = append(admitted, a)
		calls = append(calls, trimFloat(round(float64(s.StoreCalls)/secs, 0)))
	}
	name := m.String()
	if m != shared.Exact {
		name += ", T = " + strings.Join(periods, " / ")
	}
	return fmt.Sprintf("%s: %s per window · %s store calls per second", name, strings.Join(admitted, " / "), strings.Join(calls, " / "))
}

// boundLabel writes a bound for the right margin: "≤ 133", or "≤ N·L = 300"
// when the cap holds it.
func boundLabel(b float64, n, rate int) string {
	if b >= float64(n*rate) {
		return fmt.Sprintf("N·L = %s", thousands(n*rate))
	}
	return "≤ " + trimFloat(round(b, 0))
}

// groupedBars draws, for each window, one bar per series side by side.
type groupedBars struct {
	counts [][]int // per series, per window
	colors []color.Color
	width  float64 // of a window, in seconds
}

func (g *groupedBars) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	k := float64(len(g.counts))
	for s, counts := range g.counts {
		for w, n := range counts {
			if n == 0 {
				continue
			}
			x0 := (float64(w) + 0.1 + 0.8*float64(s)/k) * g.width
			x1 := x0 + 0.8/k*g.width
			gap := min((x(x1)-x(x0))*0.15, 2)
			c.FillPolygon(g.colors[s], c.ClipPolygonXY(rect(x(x0)+gap/2, y(0), x(x1)-gap/2, y(float64(n)))))
		}
	}
}

// boundLine is a dashed horizontal line with its label in the right
// margin.
type boundLine struct {
	y     float64
	style draw.LineStyle
	label string
}

func (b *boundLine) Plot(c draw.Canvas, p *plot.Plot) {
	_, y := p.Transforms(&c)
	st := withAlign(sans(tickSize, false), draw.XLeft, draw.YCenter)
	st.Color = b.style.Color
	if b.y > p.Y.Max {
		// Above the axis: marked over its top.
		st.YAlign = draw.YBottom
		c.FillText(st, vg.Point{X: c.Max.X + 4, Y: c.Max.Y}, "↑ "+b.label)
		return
	}
	c.StrokeLine2(b.style, c.Min.X, y(b.y), c.Max.X, y(b.y))
	c.FillText(st, vg.Point{X: c.Max.X + 4, Y: y(b.y)}, b.label)
}

// svgFonts makes an SVG's text name Liberation Sans, which the layout was
// measured with, and then its metric twins Arial and Helvetica for viewers
// without it.
func svgFonts(svg []byte) []byte {
	return bytes.ReplaceAll(svg, []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
}
