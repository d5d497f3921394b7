package rls

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/rules"
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

// unitOrder lists the units from the shortest.
var unitOrder = []string{"second", "minute", "hour", "day", "week", "month", "year"}

// FractionHint suggests, for a fractional requests_per_unit, the whole
// number per a longer unit that is the same rate: 2.5 per second is 150
// per minute.
func (RateLimitConfig) FractionHint(key string, v float64, sibling func(string) string) string {
	if key != "requests_per_unit" {
		return ""
	}
	_, d, ok := parseUnit(sibling("unit"))
	if !ok {
		return "write a whole number per a longer unit"
	}
	for _, name := range unitOrder {
		_, d2, _ := parseUnit(name)
		if d2 <= d || d2%d != 0 {
			continue
		}
		w := v * float64(d2/d)
		if w >= 1 && w == math.Trunc(w) {
			return fmt.Sprintf("write requests_per_unit: %d, unit: %s (the same rate over a longer unit)", int64(w), name)
		}
	}
	return "write a whole number per a longer unit"
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
// requests_per_unit, in a domain whose calendar_units is zone. With
// calendar units, a day, week, month or year is a calendar period.
func (r *RateLimitConfig) limit(zone string) ratekeeper.Limit {
	u, d, _ := parseUnit(r.Unit)
	l := ratekeeper.Limit{Algorithm: r.algorithm(), Rate: int(r.RequestsPerUnit), Period: d, Burst: r.Burst}
	zone = cmp.Or(r.CalendarUnits, zone)
	if c := calendarUnits[u]; zone != "" && c != "" {
		l.Period, l.Calendar = 0, c
		l.Location, _ = rules.LoadZone(zone)
	}
	return l
}

// calendarUnits are the units that calendar_units makes calendar periods.
var calendarUnits = map[rlsv3.RateLimitResponse_RateLimit_Unit]ratekeeper.Calendar{
	rlsv3.RateLimitResponse_RateLimit_DAY:   ratekeeper.Daily,
	rlsv3.RateLimitResponse_RateLimit_WEEK:  ratekeeper.Weekly,
	rlsv3.RateLimitResponse_RateLimit_MONTH: ratekeeper.Monthly,
	rlsv3.RateLimitResponse_RateLimit_YEAR:  ratekeeper.Yearly,
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
	showKey    bool
}

// rule is one rate_limit block.
type rule struct {
	id       int
	stat     string // domain.key_value.key: the metrics label (config-bounded)
	name     string
	replaces []string
	unit     rlsv3.RateLimitResponse_RateLimit_Unit
	mult     uint32 // an override's unit_multiplier above 1, else 0
	period   time.Duration
	rpu      uint32
	limit    ratekeeper.Limit // valid iff !unlimited && rpu > 0
	cal      ratekeeper.Limit // a calendar unit's limit, for its periods; else zero
	shadow   bool
	quota    bool // over the limit, the status is OVER_LIMIT and the overall code OK
	unlimit  bool
	detailed bool // some descriptor on its path asked for detailed metrics
	showKey  bool // some descriptor on its path asked to show its values
}

// alone reports whether r's refusal refuses nothing (shadow and quota
// mode): it is decided apart from the enforced limits.
func (r *rule) alone() bool { return r.shadow || r.quota }

// Compile turns a loaded configuration into Rules.
func Compile(c *Config) (*Rules, error) {
	rs := &Rules{domains: map[string]*level{}}
	for i := range c.Domains {
		d := &c.Domains[i]
		if err := d.Validate(); err != nil {
			return nil, err
		}
		rs.domains[d.Domain] = rs.compileLevel(d.Descriptors, d.Domain, d.CalendarUnits, false, false)
	}
	return rs, nil
}

// compileLevel compiles ds, in a domain whose calendar_units is zone.
func (rs *Rules) compileLevel(ds []DescriptorConfig, stat, zone string, detailed, showKey bool) *level {
	lv := &level{exact: map[[2]string]*node{}, prefix: map[string][]*node{}, anyValue: map[string]*node{}}
	for i := range ds {
		d := &ds[i]
		n := &node{key: d.Key, value: d.Value, detailed: detailed || d.DetailedMetric, showKey: showKey || d.ShowKey}
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
			ru := &rule{id: len(rs.rules), stat: s, name: r.Name, shadow: d.ShadowMode, quota: d.QuotaMode, unlimit: r.Unlimited, detailed: n.detailed, showKey: n.showKey}
			for _, rp := range r.Replaces {
				ru.replaces = append(ru.replaces, rp.Name)
			}
			if !r.Unlimited {
				ru.unit, ru.period, _ = parseUnit(r.Unit)
				ru.rpu = uint32(r.RequestsPerUnit)
				if ru.rpu > 0 {
					ru.limit = r.limit(zone)
				}
				if l := r.limit(zone); l.Calendar != "" {
					ru.cal = l
				}
			}
			n.rule = ru
			rs.rules = append(rs.rules, ru)
		}
		if len(d.Descriptors) > 0 {
			n.next = rs.compileLevel(d.Descriptors, s, zone, n.detailed, n.showKey)
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

// The store key of a descriptor is a sequence of fields, each of which
// says where it ends: "len:bytes", or "#" and a hash for a request's value
// longer than maxField bytes (appendBounded). A parser reading a key from
// the left therefore always knows where a field stops, whatever bytes a
// value holds, and two different descriptors never share a key (see
// FuzzDescriptorKeyInjective).
//
// The gateway bounds its key parts with rules.BoundKey, which hashes a part
// that is long, holds its '|' separator or starts with '#'. rls does not use
// it. Its fields are length-prefixed, not separated, so a '|' or a '#' in a
// value is harmless and only the length needs bounding. Hashing short
// values with '|' or a leading '#' would change their keys on upgrade, and
// so reset their counts, for nothing. Braces are hashed, as the gateway
// does: a value's hash tag would place the key on Redis Cluster. A key
// built from values of at most maxField bytes without braces is the same
// as before values were bounded.

// maxField is the longest request value (or, in an override's key, request
// key) written as it is into a store key. A longer one is replaced by a hash
// of it, so that a client sending a 60 KB header does not make a 60 KB
// Redis key.
const maxField = 64

// descriptorKey is the store key of a descriptor with a limit: counterKey
// when every entry matched a configured descriptor (path is as long as
// entries), else overrideKey. A limit override's rate and unit follow a
// '|', which cannot start a field or an entry, so that each overriding rate
// has its own count.
func descriptorKey(domain string, entries []Entry, path []*node, ov *ratelimitv3.RateLimitDescriptor_RateLimitOverride) string {
	var key string
	if len(path) == len(entries) {
		key = counterKey(domain, entries, path)
	} else {
		key = overrideKey(domain, entries)
	}
	if ov != nil {
		key += "|" + strconv.FormatUint(uint64(ov.GetRequestsPerUnit()), 10) + "/" + ov.GetUnit().String()
	}
	return key
}

// counterKey is the store key of a descriptor whose every entry matched a
// configured descriptor. It is "rls:", the domain, then per entry the kind
// of match ('=' exact, '_' any value, '*' and the prefix for a wildcard),
// the configured key and the value. Only a value matched by a wildcard or by a
// descriptor without a value comes from the client, and only it is
// bounded; the rest is the configuration's.
func counterKey(domain string, entries []Entry, path []*node) string {
	n := 4 + len(domain) + 8
	for i, e := range entries {
		n += len(path[i].key) + min(len(e.Value), 1+2*hashLen) + len(path[i].value) + 3*8
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
		b = appendField(b, p.key) // the entry's key, as find matched it
		if p.wildcard || p.value == "" {
			b = appendBounded(b, e.Value)
		} else {
			b = appendField(b, p.value) // the entry's value, as find matched it
		}
	}
	return string(b)
}

// overrideKey is the store key of a descriptor that matched no configured
// limit but brings its own (a limit override). It is "rls:override:", the
// domain and the request's keys and values, bounded; the caller appends
// the override's rate. Its 'o' can never start a counterKey's length.
func overrideKey(domain string, entries []Entry) string {
	b := make([]byte, 0, 16+len(domain)+len(entries)*2*(1+2*hashLen))
	b = append(b, "rls:override:"...)
	b = appendField(b, domain)
	for _, e := range entries {
		b = appendBounded(b, e.Key)
		b = appendBounded(b, e.Value)
	}
	return string(b)
}

// appendField appends s as a field: its length, ':', and s.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// hashLen is how many bytes of a long value's SHA-256 its field keeps, as
// in the gateway's rules.BoundKey: 128 bits. Two values meet on one key as
// rarely as one guesses a random 128-bit number.
const hashLen = 16

// appendBounded appends s as a field if it is at most maxField bytes and
// holds no brace, else '#' and the hex of its hash. A written field starts
// with a digit, so a short value that looks like a hash ("#…") keeps its
// own field. A brace could make a hash tag, by which a client would choose
// its key's Redis Cluster slot.
func appendBounded(b []byte, s string) []byte {
	if len(s) <= maxField && strings.IndexAny(s, "{}") < 0 {
		return appendField(b, s)
	}
	return appendHash(append(b, '#'), s)
}

func appendHash(b []byte, s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return hex.AppendEncode(b, sum[:hashLen])
}

// detailedStat is the metrics label of a detailed_metric rule: the
// configured path with the request's values, a value longer than maxField
// as '#' and its hash.
func detailedStat(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		b.WriteByte('_')
		if len(e.Value) <= maxField {
			b.WriteString(e.Value)
		} else {
			b.Write(appendHash([]byte{'#'}, e.Value)) // a label, not a key: it need not be told from a short "#…"
		}
	}
	return b.String()
}

// Limit is one configured rate_limit block as GET /v1/config lists it.
type Limit struct {
	// Descriptor is the block's place: the domain and the descriptors'
	// key_value path to it, as the metrics name it (domain.key_value.key).
	Descriptor      string   `json:"descriptor"`
	Name            string   `json:"name,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit"`
	Unit            string   `json:"unit,omitempty"`
	Algorithm       string   `json:"algorithm,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	ShadowMode      bool     `json:"shadow_mode,omitempty"`
	QuotaMode       bool     `json:"quota_mode,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
	DetailedMetric  bool     `json:"detailed_metric,omitempty"`
}

// Limits lists the configured rate_limit blocks in the order they were
// read (Envoy's reference service shows the same at /rlconfig).
func (rs *Rules) Limits() []Limit {
	out := make([]Limit, 0, len(rs.rules))
	for _, r := range rs.rules {
		l := Limit{Descriptor: r.stat, Name: r.name, RequestsPerUnit: r.rpu, Unlimited: r.unlimit,
			ShadowMode: r.shadow, QuotaMode: r.quota, Replaces: r.replaces, DetailedMetric: r.detailed}
		if !r.unlimit {
			l.Unit = r.unit.String()
			if r.rpu > 0 {
				l.Algorithm = string(r.limit.Algorithm)
			}
		}
		out = append(out, l)
	}
	return out
}
