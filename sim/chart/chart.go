// Package chart draws ratekeeper's figures in one look: the fonts, colours,
// axes, legends and plotters that the simulator's charts and the
// benchmarks' charts share.
//
// A figure is Width across and drawn at DPI in PNG. Its text is Liberation
// Sans; an SVG names Arial and Helvetica after it, for viewers without it.
// The package serves the project's own figures, and grows with them.
package chart

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Geometry and type. 8.5 in × 120 dpi is 1020 pixels across, sharp on a
// documentation page.
const (
	Width         = 8.5 * vg.Inch
	DPI           = 120
	LabelSize     = 10  // an axis's label
	TickSize      = 9   // an axis's ticks, and the labels on lines
	PlotTitleSize = 9.5 // a plot's title, above its data area
)

// The colours. Palette gives series their colours in order; the named
// ones are its first six, and Red marks limits and targets.
var (
	Blue   = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	Orange = color.RGBA{0xe6, 0x7e, 0x22, 0xff}
	Green  = color.RGBA{0x2e, 0x9d, 0x4a, 0xff}
	Purple = color.RGBA{0x8e, 0x44, 0xad, 0xff}
	Teal   = color.RGBA{0x17, 0x9c, 0x9c, 0xff}
	Brown  = color.RGBA{0x8c, 0x56, 0x4b, 0xff}

	Palette = []color.Color{
		Blue, Orange, Green, Purple, Teal, Brown,
		color.RGBA{0xd6, 0x60, 0x9f, 0xff}, // pink
		color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, // grey
		color.RGBA{0xb5, 0xb5, 0x2a, 0xff}, // olive
		color.RGBA{0x2c, 0x3e, 0x50, 0xff}, // navy
	}

	Red  = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	Ink  = color.RGBA{0x33, 0x33, 0x33, 0xff} // text and axes
	Grid = color.RGBA{0xe8, 0xe8, 0xe8, 0xff}
)

// Sans is Liberation Sans at size points, optionally bold, in Ink.
func Sans(size vg.Length, bold bool) text.Style {
	f := font.Font{Typeface: "Liberation", Variant: "Sans"}
	if bold {
		f.Weight = xfont.WeightBold
	}
	return text.Style{Color: Ink, Font: font.From(f, size), Handler: plot.DefaultTextHandler}
}

// Align returns s aligned at x and y.
func Align(s text.Style, x text.XAlignment, y text.YAlignment) text.Style {
	s.XAlign, s.YAlign = x, y
	return s
}

// Rect is the rectangle from (x0, y0) to (x1, y1) as a polygon.
func Rect(x0, y0, x1, y1 vg.Length) []vg.Point {
	return []vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}}
}

// Thousands writes n with commas between groups of three digits: 10,000.
func Thousands(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// StyleAxes gives p the figures' fonts and colours, marks both axes with
// ticks, and adds a light grid: horizontal lines, and vertical ones too
// when vertical is true. A plot's title is bold, centred above it.
func StyleAxes(p *plot.Plot, ticks plot.Ticker, vertical bool) {
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = Sans(LabelSize, false).Font
		a.Label.TextStyle.Color = Ink
		a.Tick.Label.Font = Sans(TickSize, false).Font
		a.Tick.Label.Color = Ink
		a.Color = Ink
		a.Tick.Color = Ink
		a.Tick.Length = 4
		a.Padding = 0
		a.Tick.Marker = ticks
	}
	p.Title.TextStyle = Align(Sans(PlotTitleSize, true), draw.XCenter, draw.YTop)
	g := plotter.NewGrid()
	g.Vertical.Color = nil
	if vertical {
		g.Vertical.Color = Grid
	}
	g.Horizontal.Color = Grid
	p.Add(g)
}

// WriteSVG draws a figure of the given size with drawFigure, as SVG.
func WriteSVG(w io.Writer, width, height vg.Length, drawFigure func(draw.Canvas) error) error {
	c := vgsvg.New(width, height)
	if err := drawFigure(draw.New(c)); err != nil {
		return err
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return err
	}
	_, err := w.Write(bytes.ReplaceAll(b.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")))
	return err
}

// WritePNG draws a figure of the given size with drawFigure, as PNG on
// white.
func WritePNG(w io.Writer, width, height vg.Length, drawFigure func(draw.Canvas) error) error {
	c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(DPI), vgimg.UseBackgroundColor(color.White))
	if err := drawFigure(draw.New(c)); err != nil {
		return err
	}
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

// Save draws a figure into the file path, as PNG or SVG by its extension.
func Save(path string, width, height vg.Length, drawFigure func(draw.Canvas) error) error {
	write := WritePNG
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png":
	case ".svg":
		write = WriteSVG
	default:
		return fmt.Errorf("%s: write .png or .svg", path)
	}
	var b bytes.Buffer
	if err := write(&b, width, height, drawFigure); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Layout fills c with white and cuts it into a header of height header at
// the top and, below it, a body that leaves footer free at the bottom.
func Layout(c draw.Canvas, header, footer vg.Length) (top, body draw.Canvas) {
	c.FillPolygon(color.White, Rect(c.Min.X, c.Min.Y, c.Max.X, c.Max.Y))
	top, body = c, c
	top.Min.Y = c.Max.Y - header
	body.Max.Y -= header
	body.Min.Y += footer
	return top, body
}
