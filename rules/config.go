package rules

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper/internal/configerr"
	"github.com/ratekeeper/ratekeeper/internal/yamlconf"
)

// Config is a rules file as written: how clients are found, the access
// lists, the header style and the rules. The gateway's file
// (gateway.Config) is this with the gateway's own fields beside it.
type Config struct {
	// ClientIP says how the client's address is found.
	ClientIP ClientIPConfig `yaml:"client_ip"`
	// Access holds the CIDR lists checked before any rule.
	Access AccessConfig `yaml:"access"`
	// Headers selects the rate limit headers: "both" (default), "legacy"
	// (X-RateLimit-*) or "ietf" (RateLimit-Policy and RateLimit).
	Headers string `yaml:"headers"`
	// Rules are the limits; a request falls under every rule it matches.
	Rules []RuleConfig `yaml:"rules"`
}

// ClientIPConfig says whom to believe about the client's address.
type ClientIPConfig struct {
	// TrustedProxies are the CIDRs (or single addresses) of proxies whose
	// forwarding header is believed. Empty: the TCP peer is the client.
	TrustedProxies List `yaml:"trusted_proxies"`
	// Header is the forwarding header the trusted proxies set:
	// "X-Forwarded-For" (default) or "Forwarded".
	Header string `yaml:"header"`
	// IPv4Prefix is how many leading bits of an IPv4 address make a key,
	// default 32.
	IPv4Prefix int `yaml:"ipv4_prefix"`
	// IPv6Prefix is how many leading bits of an IPv6 address make a key,
	// default 64.
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

// AccessConfig lists clients by CIDR. Deny is checked first: a denied
// client gets 403. An allowed client is exempt from every rule.
type AccessConfig struct {
	// Allow lists clients that no rule limits.
	Allow List `yaml:"allow"`
	// Deny lists clients refused with 403 before any rule.
	Deny List `yaml:"deny"`
}

// RuleConfig is one rule as written.
type RuleConfig struct {
	// Name identifies the rule in headers, bodies, logs and metrics, and
	// is part of its keys: letters, digits, '.', '_' and '-', at most 64.
	Name string `yaml:"name"`
	// Match says which requests the rule covers; empty matches all.
	Match MatchConfig `yaml:"match"`
	// Key lists what identifies a client: "ip", "header:NAME", "route"
	// (method and path), "path", "method", "host", or "global" (one key for
	// all; also what an empty list means). Parts combine.
	Key List `yaml:"key"`
	// OnMissingKey says what happens when a header the key needs is
	// missing or empty. With "ip" (default) the client IP stands in its
	// place. With "skip" the rule does not apply. With "shared" all such
	// requests share one counter.
	OnMissingKey string `yaml:"on_missing_key"`
	// Limit is the limit applied to each key.
	Limit LimitConfig `yaml:"limit"`
	// Concurrency limits each key's requests in flight instead of its
	// rate: a rule has either Limit or Concurrency.
	Concurrency *ConcurrencyConfig `yaml:"concurrency"`
	// Mode is "enforce" (default), "shadow" or "queue".
	Mode string `yaml:"mode"`
	// MaxDelay bounds a queued request's wait (queue mode only); zero
	// leaves only the bucket's burst as the bound.
	MaxDelay Duration `yaml:"max_delay"`
	// Ban refuses every request of a key for this long once the rule has
	// refused it (docs/gateway.md#ban); zero: no ban.
	Ban Duration `yaml:"ban"`
	// StoreMode overrides the shared store's mode for this rule's limit:
	// "exact", "sync" or "lease" (empty: the store's own). It matters
	// only on a Redis store, and is read at start.
	StoreMode string `yaml:"store_mode"`
	// Cost is what one request takes from the limit: 1 by default, a
	// fixed number, or read from a request header or from the upstream's
	// response.
	Cost CostConfig `yaml:"cost"`
	// Overrides give particular clients other limits: a key value (the
	// value of the key's one part, a header's or an address) to its limit.
	Overrides map[string]LimitConfig `yaml:"overrides"`
	// Tiers choose the limit by a header that a trusted proxy sets.
	Tiers TiersConfig `yaml:"tiers"`
	// OffsetHeader names a header that a trusted proxy
	// (client_ip.trusted_proxies) writes a client's own calendar offset in,
	// as the offset field writes one (14d, 9h). Only a calendar rule has it.
	OffsetHeader string `yaml:"offset_header"`
	// Refused shapes the answer to a request the rule refuses.
	Refused RefusedConfig `yaml:"refused"`
	// CountOnly counts a request only when its response has one of the
	// listed statuses; see CountOnlyConfig.
	CountOnly *CountOnlyConfig `yaml:"count_only"`
	// ShowKey shows header values in the admin's lists of limited clients
	// as they are, not as fingerprints.
	ShowKey bool `yaml:"show_key"`
	// OverLimit says what happens to a request once the limit is spent:
	// refuse (default), forward or reroute; see OverLimitConfig.
	OverLimit OverLimitConfig `yaml:"over_limit"`
}

// CountOnlyConfig makes a rule count outcomes. A request is decided
// before it goes upstream, taking nothing: a key whose limit is spent is
// refused. It is counted once its response's status is known, if the
// status is listed.
type CountOnlyConfig struct {
	// Status lists codes (201) and classes (4xx) that count.
	Status List `yaml:"status"`
}

// List is a list of strings that a file may write as its one item when
// it has one: `key: header:X-API-Key` is `key: [header:X-API-Key]`.
type List []string

// UnmarshalYAML reads a list, or one item as a list of one.
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = List{n.Value}
		return nil
	case yaml.SequenceNode:
		return n.Decode((*[]string)(l))
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a list (like [ip, header:X-API-Key]) or one item, not a %s", n.Line, kindName(n.Kind))}}
}

// CostConfig is a rule's cost as written: a whole number (cost: 5), or a
// mapping that names the header it is read from.
type CostConfig struct {
	// Fixed is the cost written as a number; 0 when not written (1).
	Fixed int `yaml:"-"`
	// Header is the request header the cost is read from.
	Header string `yaml:"header"`
	// ResponseHeader is the upstream's response header the cost is read
	// from, charged after the response.
	ResponseHeader string `yaml:"response_header"`
	// ResponseJSON is the path, or paths summed, of the number in the
	// response's JSON body or event stream that is the cost, charged
	// when the response ends.
	ResponseJSON List `yaml:"response_json"`
	// Reserve is what a request whose cost comes after the response takes
	// at admission, 1 unless written; the charge then settles it.
	Reserve ReserveConfig `yaml:"reserve"`
	// Max is the largest cost the header may give; required with a header.
	Max int `yaml:"max"`
	// Default is the cost of a request whose header is missing, 1 unless
	// written. For a response header it is also the cost of a response
	// whose value is not a whole number in 0..Max.
	Default *int `yaml:"default"`
}

// costFields is CostConfig without its decoder.
type costFields CostConfig

// UnmarshalYAML reads a cost as a whole number or as a mapping.
func (c *CostConfig) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		v, err := strconv.Atoi(n.Value)
		if err != nil || v < 1 {
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cost %q is not a whole number from 1, nor a mapping like {header: X-Cost, max: 100}", n.Line, n.Value)}}
		}
		*c = CostConfig{Fixed: v}
		return nil
	case yaml.MappingNode:
		if err := yamlconf.KnownKeys(n, reflect.TypeFor[costFields]()); err != nil {
			return err
		}
		return n.Decode((*costFields)(c))
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a cost (a whole number, or a mapping), not a %s", n.Line, kindName(n.Kind))}}
}

// ReserveConfig is a cost's reserve as written: a whole number
// (reserve: 4000), or a mapping that reads it from the request's JSON body
// (reserve: {request_json: max_tokens, default: 1000}).
type ReserveConfig struct {
	// N is the reserve written as a number; 0 when not written.
	N int `yaml:"-"`
	// RequestJSON is the path of the number in the request's JSON body
	// that is the reserve.
	RequestJSON string `yaml:"request_json"`
	// Default is the reserve of a request whose body does not give it.
	Default int `yaml:"default"`
}

// reserveFields is ReserveConfig without its decoder.
type reserveFields ReserveConfig

// UnmarshalYAML reads a reserve as a whole number or as a mapping.
func (c *ReserveConfig) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		v, err := strconv.Atoi(n.Value)
		if err != nil {
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: reserve %q is not a whole number, nor a mapping like {request_json: max_tokens, default: 1000}", n.Line, n.Value)}}
		}
		*c = ReserveConfig{N: v}
		return nil
	case yaml.MappingNode:
		if err := yamlconf.KnownKeys(n, reflect.TypeFor[reserveFields]()); err != nil {
			return err
		}
		return n.Decode((*reserveFields)(c))
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a reserve (a whole number, or a mapping), not a %s", n.Line, kindName(n.Kind))}}
}

// isZero reports whether no reserve is written.
func (c ReserveConfig) isZero() bool { return c == ReserveConfig{} }

// TiersConfig chooses a rule's limit by a request header that a trusted
// proxy (client_ip.trusted_proxies) writes, such as the plan an
// authenticating proxy found for the client.
type TiersConfig struct {
	// Header holds the tier's name. It is believed only when the TCP peer
	// is a trusted proxy; otherwise the rule's own limit applies.
	Header string `yaml:"header"`
	// Limits maps a tier's name to its limit.
	Limits map[string]LimitConfig `yaml:"limits"`
}

// RefusedConfig is the answer to a refused request as the operator wants
// it.
type RefusedConfig struct {
	// Status is the status code, 429 by default.
	Status int `yaml:"status"`
	// Type is the problem+json type, a URI; "about:blank" by default.
	Type string `yaml:"type"`
	// Title is the problem+json title; the status's text by default.
	Title string `yaml:"title"`
	// Detail is the problem+json detail; {rule} and {wait} stand for the
	// rule's name and the wait in seconds.
	Detail string `yaml:"detail"`
	// HideHeaders leaves the rule out of the rate limit headers.
	HideHeaders bool `yaml:"hide_headers"`
	// RetryAfterJitter is the most that is added, uniformly at random, to
	// the wait a refusal announces.
	RetryAfterJitter Duration `yaml:"retry_after_jitter"`
}

// MatchConfig selects requests. All given conditions must hold.
type MatchConfig struct {
	// Methods the request's method must be one of (case-insensitive); GET
	// covers HEAD too, which frameworks serve with GET's handler.
	Methods List `yaml:"methods"`
	// Path the request's path must equal.
	Path string `yaml:"path"`
	// PathPrefix the request's path must start with, at a segment
	// boundary: /v1/rewards matches /v1/rewards and /v1/rewards/7, not
	// /v1/rewardsX.
	PathPrefix string `yaml:"path_prefix"`
	// StrictPath compares Path and PathPrefix with the normalized path as
	// it is. By default (false) they also match the forms that common
	// frameworks route to the same handler: with ;params in a segment, with
	// a trailing slash, and in another letter case.
	StrictPath bool `yaml:"strict_path"`
	// Hosts the request's host (without port, case-insensitive) must be one
	// of; "*.example.com" matches any subdomain.
	Hosts List `yaml:"hosts"`
	// Headers maps a header name to the value it must have; the value "*"
	// means only that the header is present, and "" that it is absent or
	// empty.
	Headers map[string]string `yaml:"headers"`
	// AbsentHeaders names headers the request must not carry (or carry
	// only empty): the anonymous clients of a per-key rule.
	AbsentHeaders []string `yaml:"absent_headers"`
}

// LimitConfig is a limit as written.
type LimitConfig struct {
	// Algorithm: token_bucket, leaky_bucket, fixed_window, sliding_log or
	// sliding_window.
	Algorithm string `yaml:"algorithm"`
	// Rate is how many requests per Period.
	Rate int `yaml:"rate"`
	// Period accepts Go durations (1s, 90m, 24h) and days and weeks (1d, 1w).
	Period Duration `yaml:"period"`
	// Burst is the buckets' capacity, default Rate.
	Burst int `yaml:"burst"`
	// Stagger offsets each key's windows by a hash of the key.
	Stagger bool `yaml:"stagger"`
	// LogRejected makes the sliding log count refused requests too.
	LogRejected bool `yaml:"log_rejected"`
	// Calendar makes a fixed window follow the calendar instead of the
	// epoch: daily, weekly (from Monday), monthly or yearly.
	Calendar string `yaml:"calendar"`
	// TimeZone is the calendar's IANA time zone (Europe/Berlin); default UTC.
	TimeZone string `yaml:"time_zone"`
	// Offset moves every calendar boundary later: 14d resets a monthly
	// window on the 15th. Nil is none, or in an override or tier the
	// rule's; 0s there is none.
	Offset *Duration `yaml:"offset"`
}

// offset is the offset lc writes, 0 if none.
func (lc LimitConfig) offset() Duration {
	if lc.Offset == nil {
		return 0
	}
	return *lc.Offset
}

// FractionHint suggests, for a fractional rate, the whole rate over a
// longer period that is the same rate: rate 10.5 per 1s is 21 per 2s.
func (LimitConfig) FractionHint(key string, v float64, sibling func(string) string) string {
	if key != "rate" {
		return ""
	}
	k, whole := yamlconf.Multiple(v)
	period := scalePeriod(sibling("period"), k)
	if k == 0 || period == "" {
		return "write a whole rate over a longer period"
	}
	return fmt.Sprintf("write rate: %d, period: %s (the same rate over a period %d times as long)", whole, period, k)
}

var countUnit = regexp.MustCompile(`^([0-9]+)([a-z]+)$`)

// scalePeriod writes period (as the file wrote it) k times as long, in
// its own unit where it has one; "" if period is not a duration.
func scalePeriod(period string, k int64) string {
	if m := countUnit.FindStringSubmatch(period); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err == nil {
			return fmt.Sprintf("%d%s", n*k, m[2])
		}
	}
	d, err := ParseDuration(period)
	if err != nil || d <= 0 {
		return ""
	}
	return Duration(d * time.Duration(k)).String()
}

// Duration is a time.Duration that YAML may write as a Go duration (90s,
// 1h30m) or as whole days or weeks (1d, 2w).
type Duration time.Duration

// ParseDuration parses a Go duration or a whole number of days or weeks
// (1 to 6 digits, then d or w). It allocates only to report an error.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, unit, ok := dayWeek(s); ok {
		if time.Duration(n) > math.MaxInt64/unit {
			return 0, fmt.Errorf("%q is longer than a duration can be (106751d)", s)
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like 500ms, 90s, 24h, 1d or 1w)", s)
	}
	return d, nil
}

// dayWeek reads s as 1 to 6 digits then d or w: the count and its unit.
func dayWeek(s string) (int, time.Duration, bool) {
	if len(s) < 2 || len(s) > 7 {
		return 0, 0, false
	}
	unit := 24 * time.Hour
	switch s[len(s)-1] {
	case 'w':
		unit *= 7
	case 'd':
	default:
		return 0, 0, false
	}
	n := 0
	for _, c := range []byte(s[:len(s)-1]) {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, unit, true
}

// UnmarshalYAML decodes a duration, reporting a bad one with its line.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a duration (like 1s, 24h, 1d), not a %s", n.Line, kindName(n.Kind))}}
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a Go duration, or in days or weeks
// when it is a whole number of them.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String renders d as a config file would write it.
func (d Duration) String() string {
	t := time.Duration(d)
	switch {
	case t > 0 && t%(7*24*time.Hour) == 0:
		return fmt.Sprintf("%dw", t/(7*24*time.Hour))
	case t > 0 && t%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", t/(24*time.Hour))
	}
	return t.String()
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

// Error is one problem in a configuration file, located by file, line and
// field ("file:line: field: problem"); the gateway's rules report the same
// type.
type Error = configerr.Error

// LoadFile reads, decodes and validates the configuration file at path.
// Every problem found is reported (joined), each as an *Error.
func LoadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse decodes and validates a configuration; name (a file name) only
// labels errors.
func Parse(name string, data []byte) (*Config, error) {
	var c Config
	if _, err := yamlconf.Decode(name, data, &c, func() []*Error { _, errs := c.build(); return errs }); err != nil {
		return nil, err
	}
	return &c, nil
}
