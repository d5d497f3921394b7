package chart

import (
	"image/color"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Legend lays out a figure's legend: entries in rows, each a swatch and
// its text. Its sizes are in points.
type Legend struct {
	Size   vg.Length // of the text
	Swatch vg.Length // a swatch's width
	Box    vg.Length // a box swatch's half height
	Gap    vg.Length // after an entry's text
}

// Entry is one swatch and its text. The swatch is a box in Color, or a
// line in Line's style, or what Mark draws from x0 to x1 at height y.
type Entry struct {
	Text  string
	Color color.Color
	Line  *draw.LineStyle
	Mark  func(c draw.Canvas, x0, x1, y vg.Length)
}

// Box is an entry with a box swatch.
func Box(clr color.Color, text string) Entry { return Entry{Text: text, Color: clr} }

// Line is an entry with a line swatch.
func Line(style draw.LineStyle, text string) Entry { return Entry{Text: text, Line: &style} }

// Draw draws entries in a row from x, centred on height y.
func (l Legend) Draw(c draw.Canvas, x, y vg.Length, entries []Entry) {
	st := Align(Sans(l.Size, false), draw.XLeft, draw.YCenter)
	for _, e := range entries {
		switch {
		case e.Mark != nil:
			e.Mark(c, x, x+l.Swatch, y)
		case e.Line != nil:
			c.StrokeLine2(*e.Line, x, y, x+l.Swatch, y)
		default:
			c.FillPolygon(e.Color, Rect(x, y-l.Box, x+l.Swatch, y+l.Box))
		}
		x += l.Swatch + 5
		c.FillText(st, vg.Point{X: x, Y: y}, e.Text)
		x += st.Width(e.Text) + l.Gap
	}
}

// Rows cuts entries into rows no wider than w.
func (l Legend) Rows(entries []Entry, w vg.Length) [][]Entry {
	st := Sans(l.Size, false)
	var rows [][]Entry
	var x vg.Length
	for _, e := range entries {
		ew := l.Swatch + 5 + st.Width(e.Text)
		if len(rows) == 0 || x > 0 && x+ew > w {
			rows = append(rows, nil)
			x = 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], e)
		x += ew + l.Gap
	}
	return rows
}
