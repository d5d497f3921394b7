package sim

import (
	"fmt"
	"image/color"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// The calendar chart: one panel per case, what each limit's period has
// counted, and its resets marked and labelled in local time and UTC.
const calendarPanelH = 2.2 * vg.Inch

// calendarColor is the colour of a limit, by its id: blue follows the
// calendar, teal is billed on the 15th, orange is aligned to the epoch.
func calendarColor(id string) color.Color {
	switch {
	case id == "calendar":
		return chart.Blue
	case strings.HasPrefix(id, "offset"):
		return chart.Teal
	}
	return chart.Orange
}

func (r *CalendarResult) chartHeight() vg.Length {
	return sharedHeaderH + vg.Length(len(r.cases))*calendarPanelH + footerH
}

func (r *CalendarResult) draw(dc draw.Canvas) error {
	header, body := chart.Layout(dc, sharedHeaderH, footerH)
	r.drawHeader(header)
	plots := make([]*plot.Plot, len(r.cases))
	for i, cs := range r.cases {
		plots[i] = r.panel(cs, i == len(r.cases)-1)
	}
	alignPanels(body, plots, draw.Tiles{PadY: 0.15 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: sharedRight})
	return nil
}

// drawHeader writes the title and, on two lines below, the legend.
func (r *CalendarResult) drawHeader(c draw.Canvas) {
	cfg := r.Config
	drawTitle(c, cfg.Name, cfg.String())
	x := c.Min.X + 0.2*vg.Inch
	line := func(id string) draw.LineStyle { return draw.LineStyle{Color: calendarColor(id), Width: 1.8} }
	legend.Draw(c, x, c.Max.Y-0.58*vg.Inch, []chart.Entry{
		chart.Line(line("calendar"), "calendar: monthly, daily"),
		chart.Line(line("offset"), "monthly, offset 14d (the 15th)"),
		chart.Line(line("epoch"), "period 30d, 24h (from the epoch)"),
	})
	legend.Draw(c, x, c.Max.Y-0.85*vg.Inch, []chart.Entry{
		chart.Line(rateStyle, "the quota: "+chart.Thousands(cfg.Rate)+" per period"),
		{Text: "a reset, as the limiter said: local time · UTC", Mark: edgeMark},
	})
	plain := chart.Align(chart.Sans(legend.Size, false), draw.XRight, draw.YCenter)
	c.FillText(plain, vg.Point{X: c.Max.X - 0.2*vg.Inch, Y: c.Max.Y - 0.85*vg.Inch},
		fmt.Sprintf("offered %s× the quota per 30 d or 24 h", trimFloat(cfg.Load)))
}

// caseOutcomes are the outcomes of case name, in its limits' order.
func (r *CalendarResult) caseOutcomes(name string) []CalendarOutcome {
	var out []CalendarOutcome
	for _, o := range r.Outcomes {
		if o.Case == name {
			out = append(out, o)
		}
	}
	return out
}

// panel draws case cs: what each limit's period counted, tick by tick,
// against the quota, and each reset, its label on a row of its own.
func (r *CalendarResult) panel(cs calendarCase, last bool) *plot.Plot {
	cfg := r.Config
	span := cs.to.Sub(cs.from).Hours()
	outs := r.caseOutcomes(cs.name)
	ymax := float64(cfg.Rate) / (0.9 - 0.1*float64(len(outs)))
	p := newPanel(r.panelTitle(cs), "counted in the period", span, ymax, last)
	p.X.Tick.Marker = dateTicks(cs)
	if last {
		p.X.Label.Text = "local dates in " + cfg.Location.String()
	}
	for i, o := range outs {
		used := make([]float64, len(o.Samples))
		for j, x := range o.Samples {
			used[j] = float64(x.Used)
		}
		clr := calendarColor(o.Limit)
		var xs []float64
		var labels []string
		for _, q := range o.Periods[1:] {
			xs = append(xs, q.Start.Sub(cs.from).Hours())
			labels = append(labels, resetLabel(cs.unit, q.Start.In(cfg.Location)))
		}
		p.Add(&chart.Marks{Xs: xs, Labels: labels, Row: i, Style: draw.LineStyle{Color: clr, Width: 0.9, Dashes: []vg.Length{3, 2}},
			Overhang: sharedRight - 0.1*vg.Inch},
			&chart.Stairs{Values: used, Width: cfg.Tick.Hours(), End: span, Style: draw.LineStyle{Color: clr, Width: 1.6}})
	}
	p.Add(&chart.LabelledLine{Y: float64(cfg.Rate), Style: rateStyle, Label: chart.Thousands(cfg.Rate)})
	return p
}

// panelTitle says what case cs shows and the most each of its limits
// admitted in one of the case's local periods.
func (r *CalendarResult) panelTitle(cs calendarCase) string {
	var most []string
	for _, s := range r.Summaries() {
		if s.Case == cs.name {
			most = append(most, strings.TrimPrefix(strings.TrimPrefix(s.Label, "monthly, "), "period ")+" "+chart.Thousands(s.MostInCalendar))
		}
	}
	if cs.unit == ratekeeper.Monthly {
		return "monthly · the most admitted in one calendar month: " + strings.Join(most, ", ")
	}
	day := fmt.Sprintf("%s: %s hours", cs.dst.Format("Mon 2 January"), trimFloat(dayLength(cs.dst).Hours()))
	before, _ := cs.dst.Zone()
	if after, _ := cs.dst.Add(dayLength(cs.dst) - time.Minute).Zone(); after != before {
		day += " (" + before + " to " + after + ")"
	}
	return "daily, across " + day + " · the most admitted in one local date: " + strings.Join(most, ", ")
}

// resetLabel writes a reset at local instant t, then its time in UTC: with
// the local date for a monthly case, the times alone for a daily one.
func resetLabel(unit ratekeeper.Calendar, t time.Time) string {
	layout := "15:04 MST"
	if unit == ratekeeper.Monthly {
		layout = "Jan 2 15:04 MST"
	}
	return t.Format(layout) + " · " + t.UTC().Format("15:04") + " UTC"
}

// dateTicks marks the local midnights of case cs, in hours from its start:
// every date of a daily case, the 1st, 8th, 15th and 22nd of a monthly one.
func dateTicks(cs calendarCase) plot.ConstantTicks {
	var ts plot.ConstantTicks
	for d := cs.from; !d.After(cs.to); d = d.AddDate(0, 0, 1) {
		label := d.Format("Mon 2 Jan")
		if cs.unit == ratekeeper.Monthly {
			if (d.Day()-1)%7 != 0 || d.Day() > 22 {
				continue
			}
			label = d.Format("2 Jan")
		}
		ts = append(ts, plot.Tick{Value: d.Sub(cs.from).Hours(), Label: label})
	}
	return ts
}
