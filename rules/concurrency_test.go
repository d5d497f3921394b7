package rules

import (
	"strings"
	"testing"
	"time"
)

func TestConcurrencyRule(t *testing.T) {
	c, err := Parse("c.yaml", []byte(`rules:
  - name: uploads
    match: {path_prefix: /v1/uploads}
    key: [header:X-API-Key]
    concurrency: {max: 10}
  - name: exports
    concurrency:
      max: 2
      ttl: 1m
  - name: rate
    limit: {algorithm: token_bucket, rate: 5, period: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	up, ex, rate := set.Rules[0], set.Rules[1], set.Rules[2]
	if !up.IsConcurrency() || up.Concurrency.Max != 10 || up.Concurrency.TTL != 0 || !ex.IsConcurrency() || ex.Concurrency.TTL != time.Minute || rate.IsConcurrency() {
		t.Fatalf("rules %+v %+v %+v", up.Concurrency, ex.Concurrency, rate.Concurrency)
	}
	if !set.HasConcurrency() {
		t.Fatal("HasConcurrency false")
	}
	if got, want := up.Describe(), "uploads: path under /v1/uploads; per header:X-API-Key; concurrency: at most 10 in flight, each held until its response ends; 429 beyond; requests without the header are keyed by client IP"; got != want {
		t.Errorf("Describe:\n got %s\nwant %s", got, want)
	}
	if up.KeyPrefix() != "uploads:cc:" {
		t.Errorf("prefix %q", up.KeyPrefix())
	}
}

func TestConcurrencyRuleErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"rules:\n  - name: a\n    concurrency: {max: 0, ttl: 1s}\n", "c.yaml:3: rules[0].concurrency.max: max must be positive, not 0"},
		{"rules:\n  - name: a\n    concurrency:\n      max: 0\n", "c.yaml:4: rules[0].concurrency.max: max must be positive, not 0"},
		{"rules:\n  - name: a\n    concurrency: {}\n", "c.yaml:3: rules[0].concurrency.max: max must be positive, not 0"},
		{"rules:\n  - name: a\n    concurrency:\n      max: 3\n      ttl: 1ms\n", "c.yaml:5: rules[0].concurrency.ttl: ttl must be at least 3ms"},
		{"rules:\n  - name: a\n    concurrency: {max: 3}\n    limit: {algorithm: token_bucket, rate: 1, period: 1s}\n", "c.yaml:4: rules[0].limit: a rule has either a limit (a rate) or a concurrency"},
		{"rules:\n  - name: a\n    mode: shadow\n    concurrency: {max: 3}\n", `c.yaml:3: rules[0].mode: "shadow": a concurrency rule only enforces`},
		{"rules:\n  - name: a\n    mode: queue\n    concurrency: {max: 3}\n", `c.yaml:3: rules[0].mode: "queue": a concurrency rule only enforces`},
		{"rules:\n  - name: a\n    store_mode: lease\n    concurrency: {max: 3}\n", "c.yaml:3: rules[0].store_mode: a concurrency rule's slots are always exact"},
		{"rules:\n  - name: a\n    concurrency: {max: 3, ttll: 1s}\n", "c.yaml:3: rules[0].concurrency.ttll: unknown field; valid: max, ttl"},
	} {
		_, err := Parse("c.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
		if err != nil && strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%q: more than one error:\n%v", c.yaml, err)
		}
	}
}
