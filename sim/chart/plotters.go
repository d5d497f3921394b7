package chart

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// HLine draws a horizontal line across the data area at Y, and Extend
// beyond it on both sides.
type HLine struct {
	Y      float64
	Style  draw.LineStyle
	Extend vg.Length
}

// Plot implements plot.Plotter.
func (h *HLine) Plot(c draw.Canvas, p *plot.Plot) {
	_, y := p.Transforms(&c)
	c.StrokeLine2(h.Style, c.Min.X-h.Extend, y(h.Y), c.Max.X+h.Extend, y(h.Y))
}

// LabelledLine is a horizontal line at Y with Label in the right margin,
// in the line's colour. A line above the axis is marked over its top.
type LabelledLine struct {
	Y     float64
	Style draw.LineStyle
	Label string
}

// Plot implements plot.Plotter.
func (b *LabelledLine) Plot(c draw.Canvas, p *plot.Plot) {
	_, y := p.Transforms(&c)
	st := Align(Sans(TickSize, false), draw.XLeft, draw.YCenter)
	st.Color = b.Style.Color
	if b.Y > p.Y.Max {
		st.YAlign = draw.YBottom
		c.FillText(st, vg.Point{X: c.Max.X + 4, Y: c.Max.Y}, "↑ "+b.Label)
		return
	}
	c.StrokeLine2(b.Style, c.Min.X, y(b.Y), c.Max.X, y(b.Y))
	c.FillText(st, vg.Point{X: c.Max.X + 4, Y: y(b.Y)}, b.Label)
}

// Bars draws one bar per tick of Width (in x's units), from 0 to its count,
// with a small gap between bars wide enough to have one.
type Bars struct {
	Counts []int
	Width  float64
	Color  color.Color
}

// Plot implements plot.Plotter.
func (b *Bars) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	gap := barGap(x(b.Width) - x(0))
	for i, n := range b.Counts {
		if n == 0 {
			continue
		}
		x0, x1 := x(float64(i)*b.Width)+gap/2, x(float64(i+1)*b.Width)-gap/2
		c.FillPolygon(b.Color, c.ClipPolygonXY(Rect(x0, y(0), x1, y(float64(n)))))
	}
}

// barGap is the gap between bars w points wide.
func barGap(w vg.Length) vg.Length {
	if w > 3 {
		return min(w*0.12, 2)
	}
	return 0
}

// StackedBars draws, for each tick of Width, one bar per series stacked
// from 0 in order, with the gap Bars leaves between ticks.
type StackedBars struct {
	Counts [][]int // per series, per tick
	Colors []color.Color
	Width  float64
}

// Plot implements plot.Plotter.
func (b *StackedBars) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	gap := barGap(x(b.Width) - x(0))
	for i := range b.Counts[0] {
		x0, x1 := x(float64(i)*b.Width)+gap/2, x(float64(i+1)*b.Width)-gap/2
		base := 0
		for s, counts := range b.Counts {
			if counts[i] == 0 {
				continue
			}
			c.FillPolygon(b.Colors[s], c.ClipPolygonXY(Rect(x0, y(float64(base)), x1, y(float64(base+counts[i])))))
			base += counts[i]
		}
	}
}

// GroupedBars draws, for each window of Width, one bar per series side by
// side.
type GroupedBars struct {
	Counts [][]int // per series, per window
	Colors []color.Color
	Width  float64
}

// Plot implements plot.Plotter.
func (g *GroupedBars) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	k := float64(len(g.Counts))
	for s, counts := range g.Counts {
		for w, n := range counts {
			if n == 0 {
				continue
			}
			x0 := (float64(w) + 0.1 + 0.8*float64(s)/k) * g.Width
			x1 := x0 + 0.8/k*g.Width
			gap := min((x(x1)-x(x0))*0.15, 2)
			c.FillPolygon(g.Colors[s], c.ClipPolygonXY(Rect(x(x0)+gap/2, y(0), x(x1)-gap/2, y(float64(n)))))
		}
	}
}

// Stairs draws Values as a step line: level across each tick of Width, up
// to End.
type Stairs struct {
	Values []float64
	Width  float64
	End    float64
	Style  draw.LineStyle
}

// Plot implements plot.Plotter.
func (s *Stairs) Plot(c draw.Canvas, p *plot.Plot) {
	x, y := p.Transforms(&c)
	var pts []vg.Point
	for i, v := range s.Values {
		x0, x1 := float64(i)*s.Width, min(float64(i+1)*s.Width, s.End)
		pts = append(pts, vg.Point{X: x(x0), Y: y(v)}, vg.Point{X: x(x1), Y: y(v)})
	}
	for _, line := range c.ClipLinesXY(pts) {
		c.StrokeLines(s.Style, line)
	}
}

// Edges draws a vertical line at every multiple of Every below End.
type Edges struct {
	Every, End float64
	Style      draw.LineStyle
}

// Plot implements plot.Plotter.
func (e *Edges) Plot(c draw.Canvas, p *plot.Plot) {
	x, _ := p.Transforms(&c)
	for i := 1; float64(i)*e.Every < e.End; i++ {
		c.StrokeLine2(e.Style, x(float64(i)*e.Every), c.Min.Y, x(float64(i)*e.Every), c.Max.Y)
	}
}

// Spans shades stretches of x, each from its [0] to its [1], over the
// plot's full height.
type Spans struct {
	Spans [][2]float64
	Color color.Color
}

// Plot implements plot.Plotter.
func (s *Spans) Plot(c draw.Canvas, p *plot.Plot) {
	x, _ := p.Transforms(&c)
	for _, sp := range s.Spans {
		x0, x1 := max(x(sp[0]), c.Min.X), min(x(sp[1]), c.Max.X)
		if x1 > x0 {
			c.FillPolygon(s.Color, Rect(x0, c.Min.Y, x1, c.Max.Y))
		}
	}
}

// Marks draws a vertical line at each of Xs within the x axis and, in the
// line's colour, its label right of it. The labels sit on text row Row,
// counted from the top of the data area. A label that would reach more
// than Overhang beyond the right edge goes left of its line.
type Marks struct {
	Xs       []float64
	Labels   []string // one per X, or none
	Row      int
	Style    draw.LineStyle
	Overhang vg.Length
}

// Plot implements plot.Plotter.
func (m *Marks) Plot(c draw.Canvas, p *plot.Plot) {
	x, _ := p.Transforms(&c)
	st := Align(Sans(TickSize-1, false), draw.XLeft, draw.YTop)
	st.Color = m.Style.Color
	y := c.Max.Y - 3 - vg.Length(m.Row)*(st.Height("0")+2)
	for i, v := range m.Xs {
		if v < p.X.Min || v > p.X.Max {
			continue
		}
		c.StrokeLine2(m.Style, x(v), c.Min.Y, x(v), c.Max.Y)
		if i >= len(m.Labels) {
			continue
		}
		s, at := st, x(v)+3
		if at+st.Width(m.Labels[i]) > c.Max.X+m.Overhang {
			s.XAlign, at = draw.XRight, x(v)-3
		}
		c.FillText(s, vg.Point{X: at, Y: y}, m.Labels[i])
	}
}
