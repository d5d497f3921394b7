package sim

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// The tokens chart: one panel, the tokens charged in the last period for
// each mode, against the limit and the bucket's bound.
const tokensPanelH = 3 * vg.Inch

// tokensColors are the modes' colours, in tokensModes' order.
var tokensColors = []color.Color{chart.Orange, chart.Blue}

func (r *TokensResult) chartHeight() vg.Length {
	return sharedHeaderH + tokensPanelH + footerH
}

func (r *TokensResult) draw(dc draw.Canvas) error {
	header, body := chart.Layout(dc, sharedHeaderH, footerH)
	r.drawHeader(header)
	alignPanels(body, r.panels(), draw.Tiles{PadY: 0.15 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: sharedRight})
	return nil
}

// drawHeader writes the title and, on two lines below, the legend with
// each mode's peak.
func (r *TokensResult) drawHeader(c draw.Canvas) {
	cfg := r.Config
	drawTitle(c, cfg.Name, cfg.String())
	x := c.Min.X + 0.2*vg.Inch
	var modes []chart.Entry
	for i, s := range r.Summaries() {
		modes = append(modes, chart.Line(draw.LineStyle{Color: tokensColors[i], Width: 1.8},
			fmt.Sprintf("%s: peak %s (+%s%%)", r.modeLabel(s), chart.Thousands(s.PeakWindow), trimFloat(s.OverLimitPct))))
	}
	legend.Draw(c, x, c.Max.Y-0.58*vg.Inch, modes)
	legend.Draw(c, x, c.Max.Y-0.85*vg.Inch, []chart.Entry{
		chart.Line(rateStyle, "the limit: "+chart.Thousands(cfg.Rate)+" per "+periodUnit(cfg.Period)),
		chart.Line(boundStyle(chart.Ink), "the limit + the burst"),
	})
	plain := chart.Align(chart.Sans(legend.Size, false), draw.XRight, draw.YCenter)
	c.FillText(plain, vg.Point{X: c.Max.X - 0.2*vg.Inch, Y: c.Max.Y - 0.85*vg.Inch}, tokensWorkloadString())
}

// modeLabel names a mode as its rule's cost would be written.
func (r *TokensResult) modeLabel(s TokensSummary) string {
	if s.Reserve == 0 {
		return "charged after the response only"
	}
	return "reserve " + chart.Thousands(s.Reserve) + ", then settle"
}

// panels is the chart's one panel.
func (r *TokensResult) panels() []*plot.Plot {
	cfg := r.Config
	tick, end := cfg.Tick.Seconds(), cfg.Duration.Seconds()
	bound := float64(cfg.Rate + cfg.limit(ratekeeper.TokenBucket).Capacity())
	ymax := bound
	for _, o := range r.Outcomes {
		ymax = max(ymax, float64(o.Summary.PeakWindow))
	}
	title := fmt.Sprintf("tokens charged in the last %v, counted as each response ends; peak: the most in one such window", cfg.Period)
	p := newPanel(title, "tokens per "+periodUnit(cfg.Period), end, ymax*1.1, true)
	for i, o := range r.Outcomes {
		vs := make([]float64, len(o.Samples))
		for j, x := range o.Samples {
			vs[j] = float64(x.Window)
		}
		p.Add(&chart.Stairs{Values: vs, Width: tick, End: end, Style: draw.LineStyle{Color: tokensColors[i], Width: 1.8}})
	}
	p.Add(&chart.LabelledLine{Y: bound, Style: boundStyle(chart.Ink), Label: chart.Thousands(int(bound))},
		&chart.LabelledLine{Y: float64(cfg.Rate), Style: rateStyle, Label: chart.Thousands(cfg.Rate)})
	return []*plot.Plot{p}
}
