package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// Report is what Run measured, in every form it writes: the summary as a
// table or JSON, the counts as CSV, and the chart as SVG and PNG.
type Report interface {
	WriteTable(io.Writer) error
	WriteJSON(io.Writer) error
	WriteCSV(io.Writer) error
	WriteSVG(io.Writer) error
	WritePNG(io.Writer) error
	WriteFiles(dir string) error
}

// figure writes a result's chart and files, the same way for every kind.
// Each kind's result embeds one, made by newFigure.
type figure struct {
	name   string
	height vg.Length
	draw   func(draw.Canvas) error
	csv    func(io.Writer) error
}

// newFigure is the figure of a chart height high, drawn by drawChart, with
// files named name and counts written by csv.
func newFigure(name string, height vg.Length, drawChart func(draw.Canvas) error, csv func(io.Writer) error) figure {
	return figure{name: name, height: height, draw: drawChart, csv: csv}
}

// WriteSVG draws the chart as SVG. The text names Liberation Sans, which
// the layout was measured with, and then its metric twins Arial and
// Helvetica for viewers without it.
func (f figure) WriteSVG(w io.Writer) error { return chart.WriteSVG(w, chart.Width, f.height, f.draw) }

// WritePNG draws the chart as PNG.
func (f figure) WritePNG(w io.Writer) error { return chart.WritePNG(w, chart.Width, f.height, f.draw) }

// WriteFiles writes DIR/NAME.csv, DIR/NAME.svg and DIR/NAME.png, creating
// dir if need be.
func (f figure) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, f.name)
	for _, out := range []struct {
		ext   string
		write func(io.Writer) error
	}{{".csv", f.csv}, {".svg", f.WriteSVG}, {".png", f.WritePNG}} {
		if err := writeFile(base+out.ext, out.write); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
