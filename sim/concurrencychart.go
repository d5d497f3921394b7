package sim

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The concurrency chart's geometry: two panels (in flight, then admitted
// and refused), with room on the right for the lines' labels as in the
// shared chart.
const concurrencyPanelH = 2.1 * vg.Inch

// Colours of the concurrency chart, from the other charts' palette.
var (
	peakColor     = color.RGBA{0xa6, 0xc8, 0xe4, 0xff} // a light token_bucket blue
	meanStyle     = draw.LineStyle{Color: color.RGBA{0x1f, 0x77, 0xb4, 0xff}, Width: 1.6}
	admittedColor = color.RGBA{0x2e, 0x9d, 0x4a, 0xff}
	refusedColor  = color.RGBA{0xe6, 0x7e, 0x22, 0xff}
)

// WriteFiles writes DIR/NAME.csv, DIR/NAME.svg and DIR/NAME.png, creating
// dir if need be.
func (r *ConcurrencyResult) WriteFiles(dir string) error {
	return writeFiles(dir, r.Config.Name, r.WriteCSV, r.WriteSVG, r.WritePNG)
}

// WriteSVG draws the chart as SVG, naming the fonts as Result.WriteSVG
// does.
func (r *ConcurrencyResult) WriteSVG(w io.Writer) error {
	width, height := r.chartSize()
	return writeSVG(w, width, height, r.draw)
}

// WritePNG draws the chart as PNG.
func (r *ConcurrencyResult) WritePNG(w io.Writer) error {
	width, height := r.chartSize()
	return writePNG(w, width, height, r.draw)
}

func (r *ConcurrencyResult) chartSize() (vg.Length, vg.Length) {
	return chartWidth, sharedHeaderH + 2*concurrencyPanelH + footerH
}

func (r *ConcurrencyResult) draw(dc draw.Canvas) error {
	dc.FillPolygon(color.White, rect(dc.Min.X, dc.Min.Y, dc.Max.X, dc.Max.Y))
	header := dc
	header.Min.Y = dc.Max.Y - sharedHeaderH
	body := dc
	body.Max.Y -= sharedHeaderH
	body.Min.Y += footerH
	r.drawHeader(header)
	r.drawPanels(body)
	return nil
}

// drawHeader writes the title and, on two lines below, the legends of the
// two panels: above the data, never over it.
func (r *ConcurrencyResult) drawHeader(c draw.Canvas) {
	cfg := r.Config
	const pad = 0.2 * vg.Inch
	name := withAlign(sans(titleSize, true), draw.XLeft, draw.YTop)
	desc := withAlign(sans(titleSize-2.5, false), draw.XLeft, draw.YTop)
	x, y := c.Min.X+pad, c.Max.Y-pad
	c.FillText(name, vg.Point{X: x, Y: y}, cfg.Name)
	c.FillText(desc, vg.Point{X: x + name.Width(cfg.Name) + pad, Y: y - 2}, cfg.String())
	drawLegend(c, x, c.Max.Y-0.58*vg.Inch, []legendEntry{
		{boxSwatch(peakColor), fmt.Sprintf("most in flight in each %v", cfg.Tick)},
		{lineSwatch(meanStyle), "mean in flight"},
		{lineSwatch(rateStyle), "the limit: max " + thousands(cfg.Max)},
		{lineSwatch(boundStyle(inkColor)), "without it: λW, offered/s × hold"},
	})
	drawLegend(c, x, c.Max.Y-0.85*vg.Inch, []legendEntry{
		{boxSwatch(admittedColor), fmt.Sprintf("admitted per %v", cfg.Tick)},
		{boxSwatch(refusedColor), "refused, on top: together what was offered"},
		{lineSwatch(boundStyle(rateColor)), "what the slots serve: max/hold"},
	})
}

// drawPanels draws what was in flight, then what was admitted and
// refused, sharing the time axis.
func (r *ConcurrencyResult) drawPanels(c draw.Canvas) {
	cfg, s := r.Config, r.Summary
	tick := cfg.Tick.Seconds()
	end := cfg.Duration.Seconds()
	n := len(r.Samples)
	peaks := make([]int, n)
	means := make([]float64, n)
	admitted := make([]int, n)
	refused := make([]int, n)
	ymax1 := max(float64(cfg.Max), s.UnlimitedInFlight) * 1.15
	ymax2 := cfg.Capacity() * tick * 1.3
	for i, x := range r.Samples {
		peaks[i], means[i], admitted[i], refused[i] = x.Peak, x.Mean, x.Admitted, x.Refused
		ymax2 = max(ymax2, float64(x.Admitted+x.Refused)*1.12)
	}

	p1 := plot.New()
	styleAxes(p1)
	p1.Title.Text = fmt.Sprintf("in flight: at most %d, mean %s · Little's λW: %s/s admitted × %s s held = %s (offered: %s/s × %s s = %s)",
		s.PeakInFlight, trimFloat(round(s.MeanInFlight, 1)),
		trimFloat(round(s.AdmittedPerSecond, 1)), trimFloat(round(s.MeanHoldSeconds, 3)), trimFloat(round(s.LittleInFlight, 1)),
		trimFloat(round(s.OfferedPerSecond, 1)), trimFloat(cfg.Hold.Seconds()), trimFloat(round(s.UnlimitedInFlight, 1)))
	p1.Title.Padding = 3
	p1.X.Min, p1.X.Max = 0, end
	p1.Y.Min, p1.Y.Max = 0, ymax1
	p1.Y.Label.Text = "in flight"
	p1.Add(&bars{counts: peaks, width: tick, color: peakColor},
		&stairs{values: means, width: tick, end: end, style: meanStyle},
		&boundLine{y: s.UnlimitedInFlight, style: boundStyle(inkColor), label: "λW " + trimFloat(round(s.UnlimitedInFlight, 1))},
		&boundLine{y: float64(cfg.Max), style: rateStyle, label: "max " + thousands(cfg.Max)})

	p2 := plot.New()
	styleAxes(p2)
	p2.Title.Text = fmt.Sprintf("per %v: %s offered · %s admitted · %s refused (%s%%)", cfg.Tick,
		thousands(s.Offered), thousands(s.Admitted), thousands(s.Refused), trimFloat(round(s.RefusedPct, 1)))
	p2.Title.Padding = 3
	p2.X.Min, p2.X.Max = 0, end
	p2.Y.Min, p2.Y.Max = 0, ymax2
	p2.Y.Label.Text = "per " + cfg.Tick.String()
	p2.X.Label.Text = "time (s)"
	capacity := cfg.Capacity() * tick
	p2.Add(&stackedBars{counts: [][]int{admitted, refused}, colors: []color.Color{admittedColor, refusedColor}, width: tick},
		&boundLine{y: capacity, style: boundStyle(rateColor), label: "max/hold " + trimFloat(round(capacity, 1))})

	plots := [][]*plot.Plot{{p1}, {p2}}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: 0.15 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: sharedRight}
	canvases := plot.Align(plots, tiles, c)
	p1.Draw(canvases[0][0])
	p2.Draw(canvases[1][0])
}

// stackedBars draws, for each tick, one bar per series stacked from 0 in
// order, with the gap bars leaves between ticks.
type stackedBars struct {
	counts [][]int // per series, per tick
	colors []color.Color
	width  float64 // of a tick, in seconds
}

func (b *stackedBars) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	gap := vg.Length(0)
	if w := x(b.width) - x(0); w > 3 {
		gap = min(w*0.12, 2)
	}
	for i := range b.counts[0] {
		x0, x1 := x(float64(i)*b.width)+gap/2, x(float64(i+1)*b.width)-gap/2
		base := 0
		for s, counts := range b.counts {
			if counts[i] == 0 {
				continue
			}
			c.FillPolygon(b.colors[s], c.ClipPolygonXY(rect(x0, y(float64(base)), x1, y(float64(base+counts[i])))))
			base += counts[i]
		}
	}
}

// stairs draws values as a step line: level across each tick, up to end.
type stairs struct {
	values []float64
	width  float64 // of a tick, in seconds
	end    float64
	style  draw.LineStyle
}

func (s *stairs) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	var pts []vg.Point
	for i, v := range s.values {
		x0, x1 := float64(i)*s.width, min(float64(i+1)*s.width, s.end)
		pts = append(pts, vg.Point{X: x(x0), Y: y(v)}, vg.Point{X: x(x1), Y: y(v)})
	}
	for _, line := range c.ClipLinesXY(pts) {
		c.StrokeLines(s.style, line)
	}
}
