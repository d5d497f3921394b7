package sim

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// The concurrency chart's geometry: two panels (in flight, then admitted
// and refused), with room on the right for the lines' labels as in the
// shared chart.
const concurrencyPanelH = 2.1 * vg.Inch

// Colours of the concurrency chart, from the other charts' palette.
var (
	peakColor     = color.RGBA{0xa6, 0xc8, 0xe4, 0xff} // a light token_bucket blue
	meanStyle     = draw.LineStyle{Color: chart.Blue, Width: 1.6}
	admittedColor = chart.Green
	refusedColor  = chart.Orange
)

func (r *ConcurrencyResult) chartHeight() vg.Length {
	return sharedHeaderH + 2*concurrencyPanelH + footerH
}

func (r *ConcurrencyResult) draw(dc draw.Canvas) error {
	header, body := chart.Layout(dc, sharedHeaderH, footerH)
	r.drawHeader(header)
	alignPanels(body, []*plot.Plot{r.inFlightPanel(), r.admittedPanel()},
		draw.Tiles{PadY: 0.15 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: sharedRight})
	return nil
}

// drawHeader writes the title and, on two lines below, the legends of the
// two panels: above the data, never over it.
func (r *ConcurrencyResult) drawHeader(c draw.Canvas) {
	cfg := r.Config
	drawTitle(c, cfg.Name, cfg.String())
	x := c.Min.X + 0.2*vg.Inch
	legend.Draw(c, x, c.Max.Y-0.58*vg.Inch, []chart.Entry{
		chart.Box(peakColor, fmt.Sprintf("most in flight in each %v", cfg.Tick)),
		chart.Line(meanStyle, "mean in flight"),
		chart.Line(rateStyle, "the limit: max "+chart.Thousands(cfg.Max)),
		chart.Line(boundStyle(chart.Ink), "without it: λW, offered/s × hold"),
	})
	legend.Draw(c, x, c.Max.Y-0.85*vg.Inch, []chart.Entry{
		chart.Box(admittedColor, fmt.Sprintf("admitted per %v", cfg.Tick)),
		chart.Box(refusedColor, "refused, on top: together what was offered"),
		chart.Line(boundStyle(chart.Red), "what the slots serve: max/hold"),
	})
}

// inFlightPanel draws what was in flight: the most per tick as bars, the
// mean as a step line, the limit and what would be in flight without it.
func (r *ConcurrencyResult) inFlightPanel() *plot.Plot {
	cfg, s := r.Config, r.Summary
	tick := cfg.Tick.Seconds()
	end := cfg.Duration.Seconds()
	peaks := make([]int, len(r.Samples))
	means := make([]float64, len(r.Samples))
	for i, x := range r.Samples {
		peaks[i], means[i] = x.Peak, x.Mean
	}
	title := fmt.Sprintf("in flight: at most %d, mean %s · Little's λW: %s/s admitted × %s s held = %s (offered: %s/s × %s s = %s)",
		s.PeakInFlight, trimFloat(round(s.MeanInFlight, 1)),
		trimFloat(round(s.AdmittedPerSecond, 1)), trimFloat(round(s.MeanHoldSeconds, 3)), trimFloat(round(s.LittleInFlight, 1)),
		trimFloat(round(s.OfferedPerSecond, 1)), trimFloat(cfg.Hold.Seconds()), trimFloat(round(s.UnlimitedInFlight, 1)))
	p := newPanel(title, "in flight", end, max(float64(cfg.Max), s.UnlimitedInFlight)*1.15, false)
	p.Add(&chart.Bars{Counts: peaks, Width: tick, Color: peakColor},
		&chart.Stairs{Values: means, Width: tick, End: end, Style: meanStyle},
		&chart.LabelledLine{Y: s.UnlimitedInFlight, Style: boundStyle(chart.Ink), Label: "λW " + trimFloat(round(s.UnlimitedInFlight, 1))},
		&chart.LabelledLine{Y: float64(cfg.Max), Style: rateStyle, Label: "max " + chart.Thousands(cfg.Max)})
	return p
}

// admittedPanel draws what was admitted and refused per tick, stacked,
// and what the slots serve.
func (r *ConcurrencyResult) admittedPanel() *plot.Plot {
	cfg, s := r.Config, r.Summary
	tick := cfg.Tick.Seconds()
	admitted := make([]int, len(r.Samples))
	refused := make([]int, len(r.Samples))
	ymax := cfg.capacity() * tick * 1.3
	for i, x := range r.Samples {
		admitted[i], refused[i] = x.Admitted, x.Refused
		ymax = max(ymax, float64(x.Admitted+x.Refused)*1.12)
	}
	title := fmt.Sprintf("per %v: %s offered · %s admitted · %s refused (%s%%)", cfg.Tick,
		chart.Thousands(s.Offered), chart.Thousands(s.Admitted), chart.Thousands(s.Refused), trimFloat(round(s.RefusedPct, 1)))
	p := newPanel(title, "per "+cfg.Tick.String(), cfg.Duration.Seconds(), ymax, true)
	capacity := cfg.capacity() * tick
	p.Add(&chart.StackedBars{Counts: [][]int{admitted, refused}, Colors: []color.Color{admittedColor, refusedColor}, Width: tick},
		&chart.LabelledLine{Y: capacity, Style: boundStyle(chart.Red), Label: "max/hold " + trimFloat(round(capacity, 1))})
	return p
}
