package rules

import (
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// buildBan reads a rule's ban. Only a rule that refuses can ban: not a
// shadow rule, nor a queue (it holds requests), nor a concurrency rule
// (a key at its limit is busy, not abusive).
func buildBan(at string, rc RuleConfig, mode Mode, conc bool, fail func(string, string, ...any)) time.Duration {
	d := time.Duration(rc.Ban)
	switch {
	case d == 0:
		return 0
	case d < 0:
		fail(at+".ban", "must not be negative")
	case conc:
		fail(at+".ban", "applies to rate limits, not to a concurrency rule")
	case mode == Shadow:
		fail(at+".ban", "a shadow rule refuses no one, so it cannot ban: set mode: enforce or remove ban")
	case mode == Queue:
		fail(at+".ban", "a queue rule holds requests rather than refusing them: set mode: enforce or remove ban")
	default:
		if err := banLimit(d).Validate(); err != nil {
			fail(at+".ban", "%v", strings.TrimPrefix(err.Error(), "limit: "))
			return 0
		}
		return d
	}
	return 0
}

// banLimit is the limit that holds a ban of d: one token refilled every d.
// The refusal that starts a ban takes the token; a request of cost 0 then
// says how long the ban has left (its RetryAfter). The store keeps the
// ban, so every gateway that shares it enforces it; a full bucket is idle
// state, which the memory store's janitor drops and Redis expires.
func banLimit(d time.Duration) ratekeeper.Limit {
	return ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: d}
}

// BanLimit is the limit that holds the rule's bans (see Ban).
func (rl *Rule) BanLimit() ratekeeper.Limit { return banLimit(rl.Ban) }

// BanKey is the key that holds the ban of key, one of the rule's keys:
// the rule's name and key parts without the limit's hash. So a reload
// that changes the limit, an override or a tier keeps the key's ban. It
// is its own Redis Cluster hash tag, which ends before "ban": no rule's
// key ends that way.
func BanKey(key string) string {
	name, rest, ok := strings.Cut(key, ":")
	if ok && len(rest) > 8 && rest[8] == ':' {
		key = name + ":" + rest[9:]
	}
	return "{" + key + "}ban"
}
