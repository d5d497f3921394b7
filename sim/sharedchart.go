package sim

import (
	"fmt"
	"image/color"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratekeeper/ratekeeper/internal/shared"
	"github.com/ratekeeper/ratekeeper/sim/chart"
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
	periodColors = chart.Palette[:maxSyncPeriods]
	exactColor   = color.RGBA{0x77, 0x77, 0x77, 0xff}
)

// boundStyle is sync's bound at the sync period of colour c.
func boundStyle(c color.Color) draw.LineStyle {
	return draw.LineStyle{Color: c, Width: 1.3, Dashes: []vg.Length{5, 3}}
}

func (r *SharedResult) chartHeight() vg.Length {
	return sharedHeaderH + 3*sharedPanelH + footerH
}

func (r *SharedResult) draw(dc draw.Canvas) error {
	header, body := chart.Layout(dc, sharedHeaderH, footerH)
	r.drawHeader(header)
	r.drawPanels(body)
	return nil
}

// drawHeader writes the title and, on two lines below, the legend.
func (r *SharedResult) drawHeader(c draw.Canvas) {
	cfg := r.Config
	drawTitle(c, cfg.Name, cfg.String())
	x := c.Min.X + 0.2*vg.Inch
	modes := []chart.Entry{chart.Box(exactColor, "exact")}
	for i, T := range cfg.SyncPeriods {
		modes = append(modes, chart.Box(periodColors[i], "T = "+T.String()))
	}
	modes = append(modes, chart.Line(rateStyle, fmt.Sprintf("the limit L = %s", rateString(cfg.Rate, cfg.Period))))
	legend.Draw(c, x, c.Max.Y-0.58*vg.Inch, modes)
	legend.Draw(c, x, c.Max.Y-0.85*vg.Inch, []chart.Entry{
		chart.Line(boundStyle(chart.Ink), "sync's bound at each T: L + 2T × the other instances' rate, at most N·L (store round trips δ = 0)"),
	})
}

// drawPanels draws exact, sync and lease, stacked, sharing both axes.
func (r *SharedResult) drawPanels(c draw.Canvas) {
	// The axis shows what was admitted and the bounds up to twice the
	// limit; a bound above that is marked at the top.
	L := float64(r.Config.Rate)
	ymax := 1.5 * L
	for _, o := range r.Outcomes {
		ymax = max(ymax, float64(slices.Max(o.Admitted))*1.15)
		if o.Bound <= 2*L {
			ymax = max(ymax, o.Bound*1.08)
		}
	}
	var plots []*plot.Plot
	for _, m := range []shared.Mode{shared.Exact, shared.Sync, shared.Lease} {
		plots = append(plots, r.panel(m, ymax, m == shared.Lease))
	}
	alignPanels(c, plots, draw.Tiles{PadY: 0.15 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: sharedRight})
}

// panel is mode m's panel, up to ymax; the last one has the time axis's
// label.
func (r *SharedResult) panel(m shared.Mode, ymax float64, last bool) *plot.Plot {
	cfg := r.Config
	win := cfg.Period.Seconds()
	end := float64(cfg.Duration/cfg.Period) * win
	var group []SharedOutcome
	for _, o := range r.Outcomes {
		if o.mode == m {
			group = append(group, o)
		}
	}
	p := newPanel(r.panelTitle(m, group), "admitted per "+cfg.Period.String(), end, ymax, last)
	g := &chart.GroupedBars{Width: win}
	for _, o := range group {
		g.Counts = append(g.Counts, o.Admitted)
		g.Colors = append(g.Colors, r.colorOf(o))
	}
	p.Add(g, &chart.Edges{Every: win, End: end, Style: edgeStyle}, &chart.HLine{Y: float64(cfg.Rate), Style: rateStyle})
	if m == shared.Sync {
		for _, o := range group {
			p.Add(&chart.LabelledLine{Y: o.Bound, Style: boundStyle(r.colorOf(o)), Label: boundLabel(o.Bound, len(cfg.Split), cfg.Rate)})
		}
	}
	return p
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
		return fmt.Sprintf("N·L = %s", chart.Thousands(n*rate))
	}
	return "≤ " + trimFloat(round(b, 0))
}
