package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// ConcurrencyConfig is a concurrency limit as written: at most Max requests
// per key in flight at once. A rule has either a limit or a concurrency.
type ConcurrencyConfig struct {
	// Max is how many requests per key may be in flight.
	Max int `yaml:"max"`
	// TTL is how long a slot outlives its gateway (a crash), default 30s;
	// a live gateway refreshes its slots every third of it.
	TTL Duration `yaml:"ttl"`
}

// concurrencyRetryAfter is what a refusal by a concurrency rule tells the
// client: Retry-After: 1, the least a header can say. No slot has a known
// end; a second is short next to the requests worth limiting this way.
const concurrencyRetryAfter = time.Second

// buildConcurrency fills rl from rc's concurrency block, reporting through
// fail what is wrong. A concurrency rule has no limit block, no store_mode
// and no mode but enforce. It holds no queue, and a shadow slot would be a
// slot taken from the requests it does not limit.
func buildConcurrency(at string, rc RuleConfig, rl *Rule, fail func(field, format string, args ...any)) {
	cc := *rc.Concurrency
	if rc.Limit != (LimitConfig{}) {
		fail(at+".limit", "a rule has either a limit (a rate) or a concurrency (requests in flight), not both: write two rules matching the same requests")
	}
	c := ratekeeper.Concurrency{Max: cc.Max, TTL: time.Duration(cc.TTL), RetryAfter: concurrencyRetryAfter}
	if err := c.Validate(); err != nil {
		field := at + ".concurrency.max"
		if strings.Contains(err.Error(), "ttl") {
			field = at + ".concurrency.ttl"
		}
		fail(field, "%v", strings.TrimPrefix(err.Error(), "concurrency: "))
	}
	switch rc.Mode {
	case "", "enforce":
	default:
		fail(at+".mode", "%q: a concurrency rule only enforces (no queue, no shadow)", rc.Mode)
	}
	if rc.StoreMode != "" {
		fail(at+".store_mode", "a concurrency rule's slots are always exact (leases in Redis): remove store_mode")
	}
	rl.Concurrency = c
	// Its keys do not depend on Max: a reload that changes Max counts the
	// requests already in flight against the new one.
	rl.prefix = rc.Name + ":cc:"
}

// IsConcurrency reports whether the rule limits requests in flight
// (Concurrency) rather than a rate (Limit).
func (rl *Rule) IsConcurrency() bool { return rl.Concurrency.Max > 0 }

// describeConcurrency says what a concurrency rule does.
func describeConcurrency(c ratekeeper.Concurrency) string {
	return fmt.Sprintf("concurrency: at most %d in flight, each held until its response ends", c.Max)
}

// HasConcurrency reports whether any rule of s limits requests in flight.
func (s *Set) HasConcurrency() bool {
	for _, rl := range s.Rules {
		if rl.IsConcurrency() {
			return true
		}
	}
	return false
}
