package chart

import (
	"bytes"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"
)

func TestFormatTick(t *testing.T) {
	for _, tc := range []struct {
		v, step, top float64
		want         string
	}{
		{0, 25000, 1e5, "0"},
		{75000, 25000, 1e5, "75k"},
		{250000, 50000, 3.5e5, "250k"},
		{1.5e6, 500000, 3e6, "1.5M"},
		{4000, 1000, 4500, "4,000"}, // as the bars' 4,028: no k below 10,000
		{2500, 500, 4500, "2,500"},
		{40, 10, 55, "40"},
		{0.6, 0.2, 1.6, "0.6"},    // 3 × 0.2 is 0.6000000000000001
		{0.75, 0.25, 1.6, "0.75"}, // two decimals where the step has two
		{1, 0.5, 1.6, "1.0"},
		{-20, 10, 40, "-20"},
	} {
		if got := FormatTick(tc.v, tc.step, tc.top); got != tc.want {
			t.Errorf("FormatTick(%v, %v, %v) = %q, want %q", tc.v, tc.step, tc.top, got, tc.want)
		}
	}
}

// TestTicksReadable walks the axes the charts draw: every label is short,
// has no exponent and no run of zeros after a point (75000.00).
func TestTicksReadable(t *testing.T) {
	for _, hi := range []float64{1.6, 12, 87, 950, 4500, 87000, 350000, 2.7e6} {
		ts := Ticks{}.Ticks(0, hi)
		if len(ts) < 3 || len(ts) > 10 {
			t.Errorf("0..%v: %d ticks", hi, len(ts))
		}
		for _, tk := range ts {
			if tk.Value < 0 || tk.Value > hi*1.0000001 {
				t.Errorf("0..%v: tick at %v", hi, tk.Value)
			}
			if strings.ContainsAny(tk.Label, "eE") || strings.Contains(tk.Label, ".00") || len(tk.Label) > 5 {
				t.Errorf("0..%v: tick label %q", hi, tk.Label)
			}
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 10_000: "10,000"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestLegendRows: a row holds what fits in its width, and at least one
// entry.
func TestLegendRows(t *testing.T) {
	l := Legend{Size: 10, Swatch: 20, Box: 4, Gap: 10}
	es := []Entry{Box(Blue, "one"), Box(Orange, "two"), Line(draw.LineStyle{Color: Red, Width: 1}, "a much longer third entry")}
	if rows := l.Rows(es, 1000); len(rows) != 1 || len(rows[0]) != 3 {
		t.Errorf("wide: %d rows", len(rows))
	}
	if rows := l.Rows(es, 1); len(rows) != 3 {
		t.Errorf("narrow: %d rows, want one entry each", len(rows))
	}
}

// The SVG names Liberation Sans and its metric twins after it.
func TestWriteSVGFonts(t *testing.T) {
	var b bytes.Buffer
	err := WriteSVG(&b, 2*vg.Inch, 1*vg.Inch, func(c draw.Canvas) error {
		c.FillText(Sans(10, false), vg.Point{X: 10, Y: 10}, "x")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "font-family:'Liberation Sans',Arial,Helvetica,sans-serif;") {
		t.Errorf("SVG fonts:\n%s", b.String())
	}
}

func TestSaveRefusesOtherFormats(t *testing.T) {
	if err := Save(t.TempDir()+"/x.jpg", vg.Inch, vg.Inch, func(draw.Canvas) error { return nil }); err == nil {
		t.Error("a .jpg saved")
	}
}

// Marks draws the lines within the axis only, each label right of its
// line, or left of it where it would reach past the overhang.
func TestMarks(t *testing.T) {
	p := plot.New()
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 10, 0, 1
	m := &Marks{Xs: []float64{-1, 2, 9.9}, Labels: []string{"outside", "right", "a label too long for the edge"}, Style: draw.LineStyle{Color: Red, Width: 1}}
	p.Add(m)
	rec := &recorder.Canvas{}
	c := draw.NewCanvas(rec, 4*vg.Inch, 2*vg.Inch)
	data := p.DataCanvas(c)
	m.Plot(data, p)
	x, _ := p.Transforms(&data)
	got := map[string]vg.Length{}
	for _, a := range rec.Actions {
		if s, ok := a.(*recorder.FillString); ok {
			got[s.String] = s.Point.X
		}
	}
	if _, ok := got["outside"]; ok || len(got) != 2 {
		t.Fatalf("labels drawn: %v", got)
	}
	if at := got["right"]; at <= x(2) {
		t.Errorf("the label of x = 2 starts at %v, left of its line at %v", at, x(2))
	}
	if at := got["a label too long for the edge"]; at >= x(9.9) {
		t.Errorf("the label at the edge starts at %v, right of its line at %v", at, x(9.9))
	}
}
