package sim

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func runTokensT(t testing.TB, set func(*Config)) *TokensResult {
	t.Helper()
	c, err := Scenario("tokens", set)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*TokensResult)
}

// checkTokens demands that each mode's ticks add up to its summary, and
// that each sliding window is the sum of its period's ticks.
func checkTokens(t *testing.T, r *TokensResult) {
	t.Helper()
	c := r.Config
	per := int(c.Period / c.Tick)
	for _, o := range r.Outcomes {
		s := o.Summary
		admitted, refused, tokens, peak := 0, 0, 0, 0
		for i, x := range o.Samples {
			admitted += x.Admitted
			refused += x.Refused
			tokens += x.Tokens
			window := 0
			for _, y := range o.Samples[max(0, i-per+1) : i+1] {
				window += y.Tokens
			}
			if x.Window != window {
				t.Errorf("%s at %v: window %d, the ticks sum to %d", s.Mode, x.At, x.Window, window)
			}
			peak = max(peak, window)
		}
		if admitted != s.Admitted || refused != s.Refused || s.Admitted+s.Refused != s.Offered || tokens != s.Tokens || peak != s.PeakWindow {
			t.Errorf("%s: summary %+v; the ticks admitted %d, refused %d, charged %d, peak %d", s.Mode, s, admitted, refused, tokens, peak)
		}
		if s.OverLimit != max(0, s.PeakWindow-c.Rate) {
			t.Errorf("%s: over the limit by %d; peak %d, limit %d", s.Mode, s.OverLimit, s.PeakWindow, c.Rate)
		}
	}
}

// With a reservation of the most a response may cost, the bucket never
// goes into debt: by the end of every tick, the responses that ended have
// been charged at most the burst and the rate since the start. Charged
// after the response only, the burst of long requests overshoots that.
func TestTokensReserveHoldsTheBucket(t *testing.T) {
	r := runTokensT(t, nil)
	checkTokens(t, r)
	c := r.Config
	over := func(o TokensOutcome) (time.Duration, int) {
		total := 0
		for _, x := range o.Samples {
			total += x.Tokens
			end := x.At + c.Tick
			bound := c.Burst + int(int64(c.Rate)*int64(end)/int64(c.Period))
			if total > bound {
				return end, total - bound
			}
		}
		return 0, 0
	}
	after, reserve := r.Outcomes[0], r.Outcomes[1]
	if after.Summary.Mode != TokensAfterResponse || reserve.Summary.Mode != TokensReserve || reserve.Summary.Reserve != tokensCostMax {
		t.Fatalf("modes: %+v, %+v", after.Summary, reserve.Summary)
	}
	if at, by := over(reserve); by > 0 {
		t.Errorf("reserve: by %v charged %d more than the burst and the rate allow", at, by)
	}
	// What a response did not use is given back: more requests pass than
	// whole reservations alone would let through.
	if whole := (c.Burst + int(int64(c.Rate)*int64(c.Duration)/int64(c.Period))) / tokensCostMax; reserve.Summary.Admitted <= whole {
		t.Errorf("reserve: admitted %d, no more than %d whole reservations: nothing was given back", reserve.Summary.Admitted, whole)
	}
	if _, by := over(after); by == 0 {
		t.Errorf("after the response only: never charged more than the bucket allows; want the burst's overshoot")
	}
	if a, b := after.Summary, reserve.Summary; a.Offered != b.Offered || a.PeakWindow < 2*c.Rate || b.PeakWindow >= a.PeakWindow/2 {
		t.Errorf("peaks: after the response %+v, reserve %+v", a, b)
	}
}

// The burst arrives at once on a full bucket of 2,000: admission takes 1
// from each of the 20 when charging after the response, but the whole
// reserve from the first, so the other 19 are refused.
func TestTokensBurstAdmission(t *testing.T) {
	r := runTokensT(t, func(c *Config) { c.Duration = time.Minute })
	checkTokens(t, r)
	if got := r.Outcomes[0].Samples[0]; got.Admitted != tokensBurst || got.Refused != 0 {
		t.Errorf("after the response only, at 0: %+v", got)
	}
	if got := r.Outcomes[1].Samples[0]; got.Admitted != 1 || got.Refused != tokensBurst-1 {
		t.Errorf("reserve, at 0: %+v", got)
	}
}

// The same seed gives the same CSV; another seed, other requests.
func TestTokensDeterministic(t *testing.T) {
	csv := func(seed uint64) string {
		var b bytes.Buffer
		if err := runTokensT(t, func(c *Config) { c.Seed = seed }).WriteCSV(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	a := csv(1)
	if b := csv(1); a != b {
		t.Error("seed 1 gave two CSVs")
	}
	if b := csv(2); a == b {
		t.Error("seeds 1 and 2 gave the same CSV")
	}
	if !strings.HasPrefix(a, "t_ms,mode,tokens,window_tokens,admitted,refused,limit\n0,after-response,") {
		t.Errorf("CSV starts %q", a[:min(len(a), 80)])
	}
}

func TestTokensValidate(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Burst = 1999 }, "burst: 1999 is less than the 2000"},
		{func(c *Config) { c.Tick = 7 * time.Second }, "tick: 7s must divide the period"},
		{func(c *Config) { c.Duration = 59 * time.Second }, "duration: 59s must be a whole number"},
		{func(c *Config) { c.Duration = 90500 * time.Millisecond }, "duration: 1m30.5s must be a whole number"},
		{func(c *Config) { c.Rate = 0 }, "rate"},
	} {
		c, err := Scenario("tokens", tc.set)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}
