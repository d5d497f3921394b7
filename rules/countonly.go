package rules

import (
	"errors"
	"fmt"
	"strconv"
)

// Statuses is a set of HTTP status codes in 100..599. Its zero value is
// empty. It is a plain value: compare it with ==, copy it freely.
type Statuses struct {
	bits [10]uint64 // bit c-100 for code c
}

// Has reports whether code is in s.
func (s Statuses) Has(code int) bool {
	if code < 100 || code > 599 {
		return false
	}
	c := code - 100
	return s.bits[c/64]&(1<<(c%64)) != 0
}

// IsZero reports whether s is empty.
func (s Statuses) IsZero() bool { return s == Statuses{} }

func (s *Statuses) add(code int) {
	c := code - 100
	s.bits[c/64] |= 1 << (c % 64)
}

// ParseStatus adds to s the status that v writes: a code from 100 to 599
// ("201"), or a class of them ("4xx", any letter case).
func (s *Statuses) ParseStatus(v string) error {
	if len(v) == 3 && v[0] >= '1' && v[0] <= '5' && (v[1] == 'x' || v[1] == 'X') && (v[2] == 'x' || v[2] == 'X') {
		first := int(v[0]-'0') * 100
		for c := first; c < first+100; c++ {
			s.add(c)
		}
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || len(v) != 3 || n < 100 || n > 599 {
		return fmt.Errorf("%q is not a status: write a code from 100 to 599 (201) or a class (4xx)", v)
	}
	s.add(n)
	return nil
}

// ParseStatuses is the set of the statuses vs write, as ParseStatus reads
// each. An empty list is an error: a rule that counts nothing limits
// nothing.
func ParseStatuses(vs ...string) (Statuses, error) {
	var s Statuses
	if len(vs) == 0 {
		return s, errors.New("no status: list the statuses that count, like [201] or [4xx]")
	}
	for _, v := range vs {
		if err := s.ParseStatus(v); err != nil {
			return Statuses{}, err
		}
	}
	return s, nil
}

// buildCountOnly compiles rule rc's count_only (at field at) into rl, and
// refuses it where it cannot work. It is decided by a look that takes
// nothing and counted after the response. So it needs a rule that refuses
// at once and counts one unit: not a queue, a shadow, a concurrency rule
// or a cost.
func buildCountOnly(at string, rc RuleConfig, rl *Rule, fail func(string, string, ...any)) {
	co := rc.CountOnly
	if co == nil {
		return
	}
	at += ".count_only"
	if len(co.Status) == 0 {
		fail(at+".status", "no status: list the statuses that count, like [201] or [4xx]")
	}
	for i, v := range co.Status {
		if err := rl.CountOnly.ParseStatus(v); err != nil {
			fail(fmt.Sprintf("%s.status[%d]", at, i), "%v", err)
		}
	}
	switch {
	case rc.Concurrency != nil:
		fail(at, "a concurrency rule counts requests in flight, not responses: remove count_only or use a rate limit")
	case rl.Mode == Queue:
		fail(at, "a queued request is counted when it takes its slot, before its response: remove count_only or use mode: enforce")
	case rl.Mode == Shadow:
		fail(at, "a shadow rule refuses nothing, so it cannot hold back what count_only counts later: remove count_only or use mode: enforce")
	case !rc.Cost.isZero():
		fail(at, "a counted response takes one unit: remove cost")
	}
}

// checkCountOnly refuses a rule built in code whose CountOnly cannot
// work, as buildCountOnly refuses one in a file.
func (rl *Rule) checkCountOnly() error {
	if rl.CountOnly.IsZero() {
		return nil
	}
	if rl.Mode != Enforce || rl.IsConcurrency() || rl.Cost.Fixed != 1 || rl.Cost.Header != "" || rl.Cost.Response != "" {
		return fmt.Errorf("rule %q: CountOnly needs an enforced rate limit of cost 1, not %s mode, a concurrency limit or a cost", rl.Name, rl.Mode)
	}
	return nil
}
