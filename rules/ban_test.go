package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func TestBan(t *testing.T) {
	s := mustCompile(t, "rules:\n  - name: login\n    limit: {algorithm: fixed_window, rate: 5, period: 15m}\n    ban: 1h\n")
	rl := s.Rules[0]
	if rl.Ban != time.Hour || rl.BanLimit() != (ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: time.Hour}) {
		t.Fatalf("ban %v, limit %v", rl.Ban, rl.BanLimit())
	}
	if got := s.StoreModes()[rl.BanLimit()]; got != "exact" {
		t.Errorf("the ban's store mode: %q, want exact", got)
	}
	if d := rl.Describe(); !strings.Contains(d, "; 429 beyond, and the key is banned for 1h0m0s") {
		t.Errorf("Describe: %s", d)
	}
	// The limit's hash is not in the ban's key: a reload that changes
	// the limit keeps the ban.
	for key, want := range map[string]string{
		"login:0a1b2c3d:192.0.2.1":   "{login:192.0.2.1}ban",
		"login:ffffffff:192.0.2.1":   "{login:192.0.2.1}ban",
		"login:0a1b2c3d:2001:db8::":  "{login:2001:db8::}ban",
		"login:0a1b2c3d:h=k|1.2.3.4": "{login:h=k|1.2.3.4}ban",
	} {
		if k := BanKey(key); k != want {
			t.Errorf("BanKey(%q): %q, want %q", key, k, want)
		}
	}
}

// TestBanErrors: a ban where it cannot work is refused at its line.
func TestBanErrors(t *testing.T) {
	const lim = "    limit: {algorithm: token_bucket, rate: 5, period: 1m}\n"
	for _, c := range []struct{ yaml, want string }{
		{"rules:\n  - name: a\n" + lim + "    mode: shadow\n    ban: 1h\n", "b.yaml:5: rules[0].ban: a shadow rule refuses no one, so it cannot ban"},
		{"rules:\n  - name: a\n    limit: {algorithm: leaky_bucket, rate: 5, period: 1m}\n    mode: queue\n    ban: 1h\n", "b.yaml:5: rules[0].ban: a queue rule holds requests rather than refusing them"},
		{"rules:\n  - name: a\n    concurrency: {max: 3}\n    ban: 1h\n", "b.yaml:4: rules[0].ban: applies to rate limits, not to a concurrency rule"},
		{"rules:\n  - name: a\n" + lim + "    ban: -1h\n", "b.yaml:4: rules[0].ban: must not be negative"},
		{"rules:\n  - name: a\n" + lim + "    ban: 1ns\n", "b.yaml:4: rules[0].ban: period 1ns is not a whole number of microseconds"},
		{"rules:\n  - name: a\n" + lim + "    ban: often\n", "b.yaml:4: rules[0].ban"},
		{"rules:\n  - name: a\n" + lim + "    ban: 1h\n  - name: b\n    limit: {algorithm: token_bucket, rate: 1, period: 1h}\n    store_mode: sync\n",
			`b.yaml:7: rules[1].store_mode: store_mode "sync", but rule "a" decides the same limit with store_mode "exact"`},
	} {
		_, err := Parse("b.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
		if err != nil && strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%q: more than one error:\n%v", c.yaml, err)
		}
	}
}
