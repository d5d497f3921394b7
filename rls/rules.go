package rls

import (
	"sort"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper"
)

// Units of the reference service, as durations. A month is 30 days and a
// year 365 days, as there; windows are aligned to the Unix epoch.
var units = map[string]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	"SECOND": {rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	"MINUTE": {rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"HOUR":   {rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"DAY":    {rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"WEEK":   {rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"MONTH":  {rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"YEAR":   {rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

func parseUnit(s string) (rlsv3.RateLimitResponse_RateLimit_Unit, time.Duration, bool) {
	u, ok := units[strings.ToUpper(s)]
	return u.unit, u.d, ok
}

// unitDuration is the length of a proto unit, or 0 for UNKNOWN.
func unitDuration(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, v := range units {
		if v.unit == u {
			return v.d
		}
	}
	return 0
}

func (r *RateLimitConfig) algorithm() ratekeeper.Algorithm {
	if r.Algorithm == "" {
		return ratekeeper.FixedWindow
	}
	return ratekeeper.Algorithm(r.Algorithm)
}

// limit is the library's Limit for a validated, limited r with a positive
// requests_per_unit.
func (r *RateLimitConfig) limit() ratekeeper.Limit {
	_, d, _ := parseUnit(r.Unit)
	return ratekeeper.Limit{Algorithm: r.algorithm(), Rate: int(r.RequestsPerUnit), Period: d, Burst: r.Burst}
}

// Rules is a compiled configuration, ready to match requests. It is
// immutable and safe for concurrent use.
type Rules struct {
	domains map[string]*level
	rules   []*rule
}

// Domains returns the configured domains, sorted.
func (rs *Rules) Domains() []string {
	out := make([]string, 0, len(rs.domains))
	for d := range rs.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Len is how many limits (rate_limit blocks) the rules hold.
func (rs *Rules) Len() int { return len(rs.rules) }

// level is one list of descriptors: what the request's next entry may match.
type level struct {
	exact    map[[2]string]*node // key and value
	prefix   map[string][]*node  // key → wildcard values, longest prefix first
	anyValue map[string]*node    // key without value
}

// node is one configured descriptor.
type node struct {
	key, value string // value without its trailing * for wildcards
	wildcard   bool
	rule       *rule  // nil when the descriptor has no rate_limit
	next       *level // nil without nested descriptors
	detailed   bool
}

// rule is one rate_limit block.
type rule struct {
	id       int
	stat     string // domain.key_value.key: the metrics label (config-bounded)
	name     string
	replaces []string
	unit     rlsv3.RateLimitResponse_RateLimit_Unit
	period   time.Duration
	rpu      uint32
	limit    ratekeeper.Limit // valid iff !unlimited && rpu > 0
	shadow   bool
	unlimit  bool
	detailed bool // some descriptor on its path asked for detailed metrics
}

// Compile turns a loaded configuration into Rules.
func Compile(c *Config) (*Rules, error) {
	rs := &Rules{domains: map[string]*level{}}
	for i := range c.Domains {
		d := &c.Domains[i]
		if err := d.Validate(); err != nil {
			return nil, err
		}
		rs.domains[d.Domain] = rs.compileLevel(d.Descriptors, d.Domain, false)
	}
	return rs, nil
}

func (rs *Rules) compileLevel(ds []DescriptorConfig, stat string, detailed bool) *level {
	lv := &level{exact: map[[2]string]*node{}, prefix: map[string][]*node{}, anyValue: map[string]*node{}}
	for i := range ds {
		d := &ds[i]
		n := &node{key: d.Key, value: d.Value, detailed: detailed || d.DetailedMetric}
		s := stat + "." + d.Key
		switch {
		case d.Value == "":
			lv.anyValue[d.Key] = n
		case strings.HasSuffix(d.Value, "*"):
			n.wildcard = true
			n.value = strings.TrimSuffix(d.Value, "*")
			lv.prefix[d.Key] = append(lv.prefix[d.Key], n)
			s += "_" + d.Value
		default:
			lv.exact[[2]string{d.Key, d.Value}] = n
			s += "_" + d.Value
		}
		if r := d.RateLimit; r != nil {
			ru := &rule{id: len(rs.rules), stat: s, name: r.Name, shadow: d.ShadowMode, unlimit: r.Unlimited, detailed: n.detailed}
			for _, rp := range r.Replaces {
				ru.replaces = append(ru.replaces, rp.Name)
			}
			if !r.Unlimited {
				ru.unit, ru.period, _ = parseUnit(r.Unit)
				ru.rpu = uint32(r.RequestsPerUnit)
				if ru.rpu > 0 {
					ru.limit = r.limit()
				}
			}
			n.rule = ru
			rs.rules = append(rs.rules, ru)
		}
		if len(d.Descriptors) > 0 {
			n.next = rs.compileLevel(d.Descriptors, s, n.detailed)
		}
	}
	for _, ns := range lv.prefix {
		sort.SliceStable(ns, func(i, j int) bool { return len(ns[i].value) > len(ns[j].value) })
	}
	return lv
}

// find matches one entry at lv: the exact key and value, else the longest
// wildcard prefix, else the key alone.
func (lv *level) find(key, value string) *node {
	if n := lv.exact[[2]string{key, value}]; n != nil {
		return n
	}
	for _, n := range lv.prefix[key] {
		if strings.HasPrefix(value, n.value) {
			return n
		}
	}
	return lv.anyValue[key]
}

// Entry is one key/value pair of a descriptor.
type Entry struct {
	Key, Value string
}

// match finds the rule of a descriptor's entries in domain, as the
// reference service does: each entry descends one level, and the limit is
// the one of the descriptor reached by the last entry. It returns the
// nodes matched (for the key and metrics), or a nil rule.
func (rs *Rules) match(domain string, entries []Entry, path []*node) (*rule, []*node) {
	lv := rs.domains[domain]
	path = path[:0]
	for i, e := range entries {
		if lv == nil {
			return nil, path
		}
		n := lv.find(e.Key, e.Value)
		if n == nil {
			return nil, path
		}
		path = append(path, n)
		if i == len(entries)-1 {
			return n.rule, path
		}
		lv = n.next
	}
	return nil, path
}

// counterKey is the store key of a descriptor: the domain, then per entry
// the matched pattern and the request's value, each length-prefixed so that
// no two descriptors share a key by accident.
func counterKey(domain string, entries []Entry, path []*node) string {
	n := 4 + len(domain)
	for i, e := range entries {
		n += len(e.Key) + len(e.Value) + len(path[i].value) + 16
	}
	var buf [128]byte // the common key fits: built on the stack, one allocation for the string
	b := buf[:0]
	if n > len(buf) {
		b = make([]byte, 0, n)
	}
	b = append(b, "rls:"...)
	b = appendField(b, domain)
	for i, e := range entries {
		p := path[i]
		switch {
		case p.wildcard:
			b = append(b, '*')
			b = appendField(b, p.value)
		case p.value == "":
			b = append(b, '_')
		default:
			b = append(b, '=')
		}
		b = appendField(b, e.Key)
		b = appendField(b, e.Value)
	}
	return string(b)
}

func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// detailedStat is the metrics label of a detailed_metric rule: the
// configured path with the request's values.
func detailedStat(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(e.Value)
	}
	return b.String()
}
