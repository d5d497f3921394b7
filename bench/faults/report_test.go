package faults

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// row is one second of a run.
type row struct {
	sec                       int
	ok, refused, policy, fail int
	p50, p99, max             float64 // ms
	storeErrs, fallbacks      float64
	hotAdmitted               int
}

// result is what a run measured, and what it must show.
type result struct {
	fault, mode string
	marks       []mark
	rows        []row
	total, fail int
	failures    []string
	maxLat, p99 time.Duration
	maxExcess   time.Duration // the most a request took beyond the controls in flight with it
	slow        int           // requests over the store timeout plus the margin, beyond the controls
	fellBack    float64       // fallback decisions in all
	recovery    time.Duration // from the topology's recovery to the last fallback decision; -1: none
	recovered   bool
	episodes    int           // runs of seconds in which the fallback decided
	over        float64       // the hot limit's worst excess over any interval
	spread      time.Duration // between the first and the last gateway back on Redis
	worst       string        // where the worst excess was
	allowance   float64
	terms       terms
	leaks       string
}

func analyse(r *run, samples []sample, ticks [][2]float64) result {
	res := result{fault: r.fault.name, mode: r.mode, marks: r.marks, recovery: -1, recovered: true}
	perSecond := int(time.Second / scrapeEvery)
	seconds := make([][2]float64, (len(ticks)+perSecond-1)/perSecond)
	for i, v := range ticks {
		seconds[i/perSecond][0] += v[0]
		seconds[i/perSecond][1] += v[1]
	}
	n := len(seconds)
	for _, s := range samples {
		n = max(n, int(s.at/time.Second)+1)
	}
	res.rows = make([]row, n)
	lats := make([][]float64, n)
	var all []float64
	var admitted []flight
	var hotSamples []sample
	controls := controlsOf(samples)
	for _, s := range samples {
		if s.kind == kindControl {
			if s.status != 200 {
				res.fail++
				if len(res.failures) < 5 {
					res.failures = append(res.failures, fmt.Sprintf("control at %v: status %d %s", s.at.Round(time.Millisecond), s.status, s.err))
				}
			}
			continue
		}
		i := int(s.at / time.Second)
		rw := &res.rows[i]
		rw.sec = i
		ms := float64(s.lat) / float64(time.Millisecond)
		lats[i] = append(lats[i], ms)
		all = append(all, ms)
		res.total++
		if s.kind == kindHot {
			hotSamples = append(hotSamples, s)
		}
		switch s.status {
		case 200:
			rw.ok++
			if s.kind == kindHot {
				rw.hotAdmitted++
				admitted = append(admitted, flight{s.at, s.done})
			}
		case 429:
			rw.refused++
		case 503:
			rw.policy++
		default:
			rw.fail++
			res.fail++
			if len(res.failures) < 5 {
				res.failures = append(res.failures, fmt.Sprintf("at %v: status %d %s", s.at.Round(time.Millisecond), s.status, s.err))
			}
		}
		res.maxLat = max(res.maxLat, s.lat)
		excess := s.lat - controls.delay(s)
		res.maxExcess = max(res.maxExcess, excess)
		if excess > storeTimeout+*margin {
			res.slow++
		}
	}
	for i := range res.rows {
		res.rows[i].sec = i
		res.rows[i].p50, res.rows[i].p99, res.rows[i].max = quantile(lats[i], 0.5), quantile(lats[i], 0.99), quantile(lats[i], 1)
		if i < len(seconds) {
			res.rows[i].storeErrs, res.rows[i].fallbacks = seconds[i][0], seconds[i][1]
			res.fellBack += seconds[i][1]
		}
	}
	res.p99 = time.Duration(quantile(all, 0.99) * float64(time.Millisecond))
	if rec := r.at("recovered"); rec >= 0 && res.fellBack > 0 {
		res.recovery, res.recovered = recoveryAfter(rec, ticks)
	}
	// Episodes: runs of seconds in which the fallback decided (more than
	// the 2% a rare timeout on two busy cores makes).
	for i := range seconds {
		if !res.mostly(i, seconds) && (i == 0 || res.mostly(i-1, seconds)) {
			res.episodes++
		}
	}
	var from, to time.Duration
	res.over, from, to = overAdmission(admitted)
	if res.over > 0 {
		res.worst = whereWorst(r, hotSamples, from, to)
	}
	res.spread = returnSpread(r)
	res.terms = allowance(r, hotSamples)
	res.allowance = res.terms.sum()
	return res
}

// mostly says whether the store, not the fallback, made nearly all of
// second i's decisions.
func (res *result) mostly(i int, seconds [][2]float64) bool {
	w := res.rows[i]
	return seconds[i][1] <= 0.02*float64(w.ok+w.refused+w.policy+w.fail)
}

// recoveryAfter is the time from when the topology served again (rec) to
// the start of the first half second after it in which the store, not the
// fallback, made nearly all the decisions (a rare timeout on two busy
// cores is not a fallback that lasts); false if none came.
func recoveryAfter(rec time.Duration, ticks [][2]float64) (time.Duration, bool) {
	// Requests per tick are the load's rate.
	perTick := float64(hotPerTick*100+coldKeys*coldPerKey+servePerSec) * scrapeEvery.Seconds()
	half := int(time.Second/scrapeEvery) / 2
	for i := int(rec / scrapeEvery); i+half <= len(ticks); i++ {
		clean := true
		for _, v := range ticks[i : i+half] {
			clean = clean && v[1] <= 0.02*perTick
		}
		if clean {
			return max(0, time.Duration(i)*scrapeEvery-rec), true
		}
	}
	return -1, false
}

// whereWorst says where the worst excess was, and which gateway admitted
// it: for a run that fails, the first thing to look at.
func whereWorst(r *run, hot []sample, from, to time.Duration) string {
	by := make([]int, gateways)
	for _, s := range hot {
		if s.status == 200 && s.at >= from && s.done <= to && s.gateway >= 0 {
			by[s.gateway]++
		}
	}
	var ms []string
	for _, m := range r.marks {
		ms = append(ms, fmt.Sprintf("%s at %v", m.name, m.at.Round(time.Millisecond)))
	}
	return fmt.Sprintf("%v to %v (%s): admitted by gateway %v", from, to, strings.Join(ms, ", "), by)
}

// returnSpread is how long after the first gateway the last came back to
// Redis from its fallback: each gateway's breaker closes on its own probe,
// and meanwhile those still on their local share admit beside Redis.
// A gateway is back at the start of the first half second after the
// topology's recovery in which it made no fallback decision.
func returnSpread(r *run) time.Duration {
	rec := r.at("recovered")
	if rec < 0 || len(r.byGateway) == 0 {
		return 0
	}
	half := int(time.Second/scrapeEvery) / 2
	var first, last time.Duration = -1, -1
	for g := range r.byGateway[0] {
		fell := false
		for _, tick := range r.byGateway {
			fell = fell || tick[g] > 0
		}
		if !fell {
			continue
		}
		back := time.Duration(-1)
		for i := int(rec / scrapeEvery); i+half <= len(r.byGateway); i++ {
			clean := true
			for _, tick := range r.byGateway[i : i+half] {
				clean = clean && tick[g] == 0
			}
			if clean {
				back = time.Duration(i) * scrapeEvery
				break
			}
		}
		if back < 0 {
			continue // never back: the recovery check fails the run
		}
		if first < 0 || back < first {
			first = back
		}
		last = max(last, back)
	}
	if first < 0 {
		return 0
	}
	return last - first
}

// flight is one request's time in flight: sent and answered, since the
// run began. Its decision was made within it.
type flight struct{ sent, answered time.Duration }

// overAdmission is the most the hot key's admissions exceeded the token
// bucket's promise (burst + rate·t over any interval of length t), over
// intervals on a 50 ms grid. A request counts in an interval only when
// it was sent and answered within it: its decision was then within it
// too, however long a busy machine kept it in flight.
func overAdmission(admitted []flight) (over float64, from, to time.Duration) {
	if len(admitted) == 0 {
		return 0, 0, 0
	}
	const step = 50 * time.Millisecond
	g := 0
	for _, f := range admitted {
		g = max(g, int((f.answered+step-1)/step))
	}
	// in[a][b]: requests sent at or after a·step and answered by b·step.
	in := make([][]int32, g+2)
	in[g+1] = make([]int32, g+1)
	for a := g; a >= 0; a-- {
		in[a] = make([]int32, g+1)
	}
	for _, f := range admitted {
		in[int(f.sent/step)][int((f.answered+step-1)/step)]++
	}
	for a := g; a >= 0; a-- {
		var row int32
		for b := range in[a] {
			row += in[a][b]
			in[a][b] = in[a+1][b] + row
		}
	}
	worst := math.Inf(-1)
	for a := 0; a < g; a++ {
		for b := a + 1; b <= g; b++ {
			got := float64(in[a][b])
			promise := hotBurst + hotRate*(time.Duration(b-a)*step).Seconds()
			if got-promise > worst {
				worst, from, to = got-promise, time.Duration(a)*step, time.Duration(b)*step
			}
		}
	}
	return max(0, worst), from, to
}

// terms are the parts of a run's allowance.
type terms struct {
	local  float64 // what the gateways' local shares could admit
	runs   int     // runs of fallback decisions, gateway by gateway
	outage float64 // what Redis could not admit while it decided nothing
	lost   float64 // counters a fault lost
	split  time.Duration
	sync   float64 // sync mode's bound
}

func (t terms) sum() float64 { return clockSlack + t.local + t.outage + t.lost + t.sync }

func (t terms) String() string {
	return fmt.Sprintf("%.0f = %d + local %.0f (%d runs) %+.0f Redis's outages + lost %.0f (two primaries for %v) + sync %.0f",
		t.sum(), clockSlack, t.local, t.runs, t.outage, t.lost, t.split, t.sync)
}

// clockSlack covers an admission at an interval's edge that Redis's
// clock and the load's place on either side of it.
const clockSlack = 2

// allowance is the excess a run may show by design. Redis's bucket keeps
// its promise, but for what a fault loses. Each gateway's local share
// admits, in each run of its fallback decisions, at most its bucket
// (burst/N) and rate/N over the run, and no more than the decisions it
// made. Where Redis decided nothing for longer than burst/rate, it did
// not admit rate·D, and its bucket filled up again: it saves rate·D −
// burst.
func allowance(r *run, hot []sample) terms {
	var t terms
	if r.fault.unbounded {
		t.local = math.Inf(1)
		return t
	}
	t.local, t.runs = localShares(r)
	gaps := redisGaps(hot)
	for _, d := range gaps {
		t.outage -= hotRate*d.Seconds() - hotBurst
	}
	switch {
	case r.fault.losesState && len(gaps) > 0:
		// A failover loses what the replica had not received yet:
		// about 100 ms of admissions at most on one machine. A bucket
		// lost while Redis decided nothing is the one that filled up.
		t.lost = 0.1 * hotRate
	case r.fault.losesState:
		// A bucket the new primary lost or had not seen, and what the
		// old primary admitted after the promotion (r.split) and in the
		// 100 ms its clients take to leave it.
		t.lost, t.split = hotBurst+hotRate*(r.split+100*ms).Seconds(), r.split
	}
	if r.mode == "sync" {
		// Sync's stated bound, (N−1)·r·(2T+2δ), T = 100 ms, δ = 50 ms.
		t.sync = (gateways - 1) * hotRate * 0.3
		if t.runs > 0 {
			// While Redis does not answer, each gateway decides from
			// what it last read for max(1 s, 10·T) before the policy
			// takes over, unaware of the others' admissions meanwhile
			// (docs/redis.md, "When Redis fails").
			t.sync += (gateways - 1) * hotRate * 1.0
		}
	}
	return t
}

// localShares bounds what the gateways' local fallbacks admitted of the
// hot key. A gateway's run of scrapes with fallback decisions lasted from
// the scrape before it began to the end of its last; in it, its share
// admitted no more than those decisions nor than its bucket (burst/N) and
// rate/N over the run. Runs less than burst/rate apart (a busy machine
// drops scrapes, and one in a run may see no decision) are bounded
// together too: the bucket had not filled up between them.
func localShares(r *run) (local float64, runs int) {
	share := func(d time.Duration) float64 { return (hotBurst + hotRate*d.Seconds()) / gateways }
	for g := range gateways {
		var group struct {
			from, to             time.Duration
			decisions, separated float64
		}
		flush := func() {
			local += min(group.separated, group.decisions, share(group.to-group.from))
			group.decisions, group.separated = 0, 0
		}
		for i := 0; i < len(r.byGateway); i++ {
			if r.byGateway[i][g] == 0 {
				continue
			}
			j, decisions := i, 0.0
			for ; j < len(r.byGateway) && r.byGateway[j][g] > 0; j++ {
				decisions += r.byGateway[j][g]
			}
			var began time.Duration
			if i > 0 {
				began = r.scrapes[i-1][0]
			}
			ended := r.scrapes[j-1][1]
			if group.decisions > 0 && began-group.to >= time.Second*hotBurst/hotRate {
				flush()
			}
			if group.decisions == 0 {
				group.from = began
			}
			group.to = ended
			group.decisions += decisions
			group.separated += min(decisions, share(ended-began))
			runs++
			i = j
		}
		if group.decisions > 0 {
			flush()
		}
	}
	return local, runs
}

// redisGaps are the times longer than burst/rate in which Redis decided
// no hot request: no request it answered (its X-RateLimit-Limit is the
// whole burst; a local share's is smaller) was in flight.
func redisGaps(hot []sample) []time.Duration {
	var spans []flight
	for _, s := range hot {
		if (s.status == 200 || s.status == 429) && s.limit == hotBurst {
			spans = append(spans, flight{s.at, s.done})
		}
	}
	slices.SortFunc(spans, func(a, b flight) int { return cmp.Compare(a.sent, b.sent) })
	var gaps []time.Duration
	for i := 1; i < len(spans); i++ {
		if d := spans[i].sent - spans[i-1].answered; d > time.Second*hotBurst/hotRate {
			gaps = append(gaps, d)
		}
		spans[i].answered = max(spans[i].answered, spans[i-1].answered)
	}
	return gaps
}

// storeTimeout is the fleet's store timeout.
const storeTimeout = 50 * time.Millisecond

// stall is how much later than the controls in flight with it a request
// may be answered, on top of the margin, for the few that 0.5% allows:
// a process the scheduler left waiting. Many are a call that ignored its
// deadline.
const stall = 1500 * time.Millisecond

// controls are the control requests, by the time they were sent.
type controls []sample

func controlsOf(samples []sample) controls {
	var c controls
	for _, s := range samples {
		if s.kind == kindControl {
			c = append(c, s)
		}
	}
	slices.SortFunc(c, func(a, b sample) int { return cmp.Compare(a.at, b.at) })
	return c
}

// delay is what the machine added to s: the longest latency of the
// controls in flight at the same time, which made no store call. A call
// that ignores its deadline delays s alone.
func (c controls) delay(s sample) time.Duration {
	var d time.Duration
	i, _ := slices.BinarySearchFunc(c, s.at-10*time.Second, func(x sample, at time.Duration) int { return cmp.Compare(x.at, at) })
	for ; i < len(c) && c[i].at < s.done; i++ {
		if c[i].done > s.at {
			d = max(d, c[i].lat)
		}
	}
	return d
}

// check fails the test for each property the run broke.
func (res result) check(t testing.TB) {
	t.Helper()
	if res.fail > 0 {
		t.Errorf("%d of %d requests failed (only 200 and the policy's answers may come back): %s", res.fail, res.total, strings.Join(res.failures, "; "))
	}
	if most := res.total / 200; res.slow > most {
		t.Errorf("%d requests took the store timeout plus the margin (%v) longer than the controls in flight with them, more than 0.5%% of %d", res.slow, storeTimeout+*margin, res.total)
	}
	if limit := storeTimeout + *margin + stall; res.maxExcess > limit {
		t.Errorf("a request took %v longer than the controls in flight with it, more than the store timeout, the margin and a stall of the machine (%v)", res.maxExcess, limit)
	}
	if !res.recovered {
		t.Errorf("decisions still came from the fallback at the end of the run, %v after the topology recovered", after)
	} else if res.recovery > *recoverBy {
		t.Errorf("decisions came back to Redis %v after the topology recovered, more than %v", res.recovery, *recoverBy)
	}
	if res.over > res.allowance {
		t.Errorf("the hot limit admitted %.0f over its promise, more than the %v allowed by design in %s mode: %s", res.over, res.terms, res.mode, res.worst)
	}
	t.Logf("%s/%s: %d requests, %d failed, max %v (%v beyond the controls), p99 %v, %.0f fallback decisions in %d episodes, back to Redis %v after recovery (gateways %v apart), over-admission %.0f (allowed %v), worst %s; %s",
		res.fault, res.mode, res.total, res.fail, res.maxLat.Round(time.Millisecond), res.maxExcess.Round(time.Millisecond), res.p99.Round(time.Millisecond), res.fellBack, res.episodes, res.recovery, res.spread, res.over, res.terms, res.worst, res.leaks)
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s)-1)+0.5))]
}

func writeCSV(path string, rows []row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"second", "ok", "refused", "policy", "failed", "p50_ms", "p99_ms", "max_ms", "store_errors", "fallback_decisions", "hot_admitted", "hot_limit"})
	ff := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	for _, r := range rows {
		w.Write([]string{strconv.Itoa(r.sec), strconv.Itoa(r.ok), strconv.Itoa(r.refused), strconv.Itoa(r.policy), strconv.Itoa(r.fail),
			ff(r.p50), ff(r.p99), ff(r.max), ff(r.storeErrs), ff(r.fallbacks), strconv.Itoa(r.hotAdmitted), strconv.Itoa(hotRate)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeSummary writes the table docs/reliability.md quotes.
func writeSummary(path string, results []result) error {
	var b strings.Builder
	b.WriteString("| fault | mode | requests | failed | max latency | p99 | fallback decisions | back to Redis after | gateways apart | over-admission (allowed) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		rec, apart := "no fallback", "-"
		if r.recovery >= 0 {
			rec = r.recovery.Round(100 * time.Millisecond).String()
			apart = r.spread.String()
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %v | %v | %.0f | %s | %s | %.0f (%.0f) |\n", r.fault, r.mode, r.total, r.fail,
			r.maxLat.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.fellBack, rec, apart, r.over, r.allowance)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Chart colours, one per series, the same in every chart.
var (
	okColor       = color.RGBA{0x2e, 0x9d, 0x4a, 0xff}
	refusedColor  = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	policyColor   = color.RGBA{0xe6, 0x7e, 0x22, 0xff}
	failColor     = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	fallbackColor = color.RGBA{0x8e, 0x44, 0xad, 0xff}
	p50Color      = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	p99Color      = color.RGBA{0xe6, 0x7e, 0x22, 0xff}
	maxColor      = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	limitColor    = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	admitColor    = color.RGBA{0x33, 0x33, 0x33, 0xff}
	markColor     = color.RGBA{0x99, 0x99, 0x99, 0xff}
)

func sans(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: font.From(font.Font{Typeface: "Liberation", Variant: "Sans"}, size), Handler: plot.DefaultTextHandler}
}

// series is one line of a panel.
type series struct {
	name  string
	color color.Color
	dash  bool
	y     func(row) float64
}

// drawRun draws a run's three panels, one above the other, sharing the
// time axis: answers per second by kind with the fallback's decisions,
// latency percentiles, and the hot key's admissions against its limit;
// the fault's marks are vertical lines.
func drawRun(path string, r *run, res result) error {
	panels := []struct {
		title, ylabel string
		lines         []series
	}{
		{"answers per second", "requests", []series{
			{"200", okColor, false, func(w row) float64 { return float64(w.ok) }},
			{"429", refusedColor, false, func(w row) float64 { return float64(w.refused) }},
			{"503 (deny policy)", policyColor, false, func(w row) float64 { return float64(w.policy) }},
			{"failed", failColor, false, func(w row) float64 { return float64(w.fail) }},
			{"fallback decisions", fallbackColor, true, func(w row) float64 { return w.fallbacks }},
		}},
		{"latency", "ms", []series{
			{"p50", p50Color, false, func(w row) float64 { return w.p50 }},
			{"p99", p99Color, false, func(w row) float64 { return w.p99 }},
			{"max", maxColor, false, func(w row) float64 { return w.max }},
		}},
		{"hot key: admitted per second", "requests", []series{
			{"admitted", admitColor, false, func(w row) float64 { return float64(w.hotAdmitted) }},
			{fmt.Sprintf("limit %d/s", hotRate), limitColor, true, func(row) float64 { return hotRate }},
		}},
	}
	const width, panelH, headH = 8.5 * vg.Inch, 1.7 * vg.Inch, 0.55 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(width, headH+3*panelH), vgimg.UseDPI(110))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	title := fmt.Sprintf("%s, %s mode: %d requests, %d failed, max %v, over-admission %.0f (allowed %.0f)",
		res.fault, res.mode, res.total, res.fail, res.maxLat.Round(time.Millisecond), res.over, res.allowance)
	dc.FillText(sans(12), vg.Point{X: 0.3 * vg.Inch, Y: dc.Max.Y - 0.3*vg.Inch}, title)
	rows := res.rows
	if len(rows) > 1 {
		rows = rows[:len(rows)-1] // the last second is cut short by the end of the load
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.TextStyle = sans(10)
		p.Y.Label.Text = pn.ylabel
		p.Y.Label.TextStyle = sans(9)
		p.X.Tick.Label = sans(8)
		p.Y.Tick.Label = sans(8)
		p.Y.Min = 0
		if i == len(panels)-1 {
			p.X.Label.Text = "seconds"
			p.X.Label.TextStyle = sans(9)
		}
		p.Legend.Top = true
		p.Legend.Left = false
		p.Legend.XOffs = 1.3 * vg.Inch // to the right of the data area
		p.Legend.TextStyle = sans(8)
		var top float64
		for _, s := range pn.lines {
			pts := make(plotter.XYs, len(rows))
			for k, w := range rows {
				pts[k] = plotter.XY{X: float64(w.sec) + 0.5, Y: s.y(w)}
				top = max(top, pts[k].Y)
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width = s.color, 1.4
			if s.dash {
				l.Dashes = []vg.Length{4, 2}
			}
			p.Add(l)
			p.Legend.Add(s.name, l)
		}
		p.Y.Max = max(1, top*1.1)
		for _, m := range res.marks {
			x := m.at.Seconds()
			ml, _ := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: p.Y.Max}})
			ml.Color, ml.Dashes, ml.Width = markColor, []vg.Length{2, 2}, 1
			p.Add(ml)
		}
		p.X.Min, p.X.Max = 0, float64(len(rows))
		p.X.Tick.Marker = wholeTicks{}
		p.Y.Tick.Marker = wholeTicks{}
		plots[i] = []*plot.Plot{p}
	}
	// One column of panels whose data areas line up, so that the marks
	// fall at the same x in each.
	area := draw.Canvas{Canvas: dc, Rectangle: vg.Rectangle{Min: vg.Point{X: 0, Y: 0}, Max: vg.Point{X: width - 1.4*vg.Inch, Y: dc.Max.Y - headH}}}
	canvases := plot.Align(plots, draw.Tiles{Rows: len(panels), Cols: 1, PadY: 0.1 * vg.Inch}, area)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// wholeTicks marks an axis at a round step, labelled without decimals
// (gonum's default writes 500.00).
type wholeTicks struct{}

func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if span <= 0 {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10(span/4)))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}
