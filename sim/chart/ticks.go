package chart

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// Ticks marks an axis at round steps (1, 2 or 5 times a power of ten),
// about eight of them at most, with no minor ticks. Format writes a tick's
// label; nil means FormatTick.
type Ticks struct {
	Format func(v, step, top float64) string
}

// Ticks returns the marks from lo to hi.
func (t Ticks) Ticks(lo, hi float64) []plot.Tick {
	format := t.Format
	if format == nil {
		format = FormatTick
	}
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: format(lo, 1, lo)}}
	}
	raw := (hi - lo) / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ts []plot.Tick
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+step*1e-9; i++ {
		v := i * step
		if v == 0 {
			v = 0 // not -0
		}
		ts = append(ts, plot.Tick{Value: v, Label: format(v, step, max(math.Abs(lo), math.Abs(hi)))})
	}
	return ts
}

// FormatTick writes a tick's value v on an axis marked every step up to
// top. Where the axis reaches 10,000 and the step is a thousand or more it
// writes 250k and 1.5M. Where the step is whole it writes 2,500. Else it
// keeps the step's decimals (0.25, 0.5): never 75000.00.
func FormatTick(v, step, top float64) string {
	switch {
	case v == 0:
		return "0"
	case step >= 1000 && top >= 1e4 && math.Abs(v) >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case step >= 1000 && top >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case step >= 1:
		return Thousands(int(math.Round(v)))
	}
	d := 0
	for s := step; math.Abs(s-math.Round(s)) > 1e-9*step && d < 12; s *= 10 {
		d++
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}
