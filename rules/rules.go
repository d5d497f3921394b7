package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Mode is what a rule does with a request over its limit.
type Mode int

const (
	// Enforce refuses it with 429.
	Enforce Mode = iota
	// Shadow lets it through but counts, logs and reports it: for rolling
	// out a new limit.
	Shadow
	// Queue holds it until its slot in the leaky bucket's FIFO queue, up to
	// MaxDelay, and refuses it beyond.
	Queue
)

// String is the mode as configs write it.
func (m Mode) String() string {
	switch m {
	case Shadow:
		return "shadow"
	case Queue:
		return "queue"
	}
	return "enforce"
}

// HeaderStyle selects which rate limit headers responses carry.
type HeaderStyle int

const (
	// HeadersBoth sends the X-RateLimit-* and the IETF fields.
	HeadersBoth HeaderStyle = iota
	// HeadersLegacy sends X-RateLimit-Limit, -Remaining, -Reset.
	HeadersLegacy
	// HeadersIETF sends RateLimit-Policy and RateLimit.
	HeadersIETF
	// HeadersNone sends none (Retry-After still goes with a 429).
	HeadersNone
)

// ParseHeaderStyle reads "both", "legacy", "ietf" or "none"; "" is both.
func ParseHeaderStyle(s string) (HeaderStyle, error) {
	switch s {
	case "", "both":
		return HeadersBoth, nil
	case "legacy":
		return HeadersLegacy, nil
	case "ietf":
		return HeadersIETF, nil
	case "none":
		return HeadersNone, nil
	}
	return 0, fmt.Errorf("%q is not both, legacy, ietf or none", s)
}

// Missing says what a rule does when a header its key needs is absent.
type Missing int

const (
	// MissingIP keys the request by the client IP in the header's place.
	MissingIP Missing = iota
	// MissingSkip does not apply the rule to the request.
	MissingSkip
	// MissingShared counts all such requests under one key.
	MissingShared
)

// KeyFunc extracts a rule's key from a request whose client IP is ip. It
// returns false when the request has no key (the rule then does not apply).
type KeyFunc func(r *http.Request, ip netip.Addr) (string, bool)

// Rule is one compiled rule. Its fields are read-only once built.
type Rule struct {
	// Index is the rule's position in its Set.
	Index int
	// Name is the rule's name.
	Name string
	// Limit is applied to each key; zero for a concurrency rule.
	Limit ratekeeper.Limit
	// Concurrency is applied to each key instead of Limit when its Max is
	// positive (IsConcurrency).
	Concurrency ratekeeper.Concurrency
	// Mode is enforce, shadow or queue.
	Mode Mode
	// MaxDelay bounds a queued request's wait (0: the bucket's burst alone).
	MaxDelay time.Duration
	// Ban is how long a key the rule refuses stays refused; zero: none.
	Ban time.Duration
	// StoreMode is the shared store's mode for this rule's limit, or empty
	// for the store's own.
	StoreMode string
	// Cost is what a request takes from the limit.
	Cost Cost
	// CountOnly, when not empty, makes the rule count only the requests
	// whose responses have these statuses. A request is admitted if one
	// unit is left, taking nothing. It takes the unit once its response's
	// status is in CountOnly.
	CountOnly Statuses
	// Alts are the overrides' and tiers' limits, which replace Limit for
	// the requests they apply to (Match.Alt).
	Alts []Alt
	// OverLimit says what happens to a request past the limit: refused
	// (the zero value), forwarded or rerouted.
	OverLimit OverLimit

	// What a request's decision reads is above, near match and key.
	match  func(v view) bool
	key    appendKey
	prefix string // name + limit hash, the start of every key

	// Refused is the answer to a request the rule refuses.
	Refused Refusal
	// Config is the rule as written.
	Config RuleConfig

	clientIP   ClientIP
	overrides  map[string]int // encoded key parts -> 1 + index in Alts
	tierHeader string         // canonical; "" without tiers
	tiers      map[string]int // tier name -> 1 + index in Alts
	// offsetHeader is offset_header, canonical; "" without one.
	offsetHeader string
	offsetHexes  *offsetHexes // the limit hashes of clients' offsets
}

// NewRule builds a rule outside a config file: it matches every request
// and keys it by key, bounded as BoundKey does. The middleware's
// single-limit form uses it.
func NewRule(name string, limit ratekeeper.Limit, mode Mode, key KeyFunc) (*Rule, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	if mode == Queue && limit.Algorithm != ratekeeper.LeakyBucket {
		return nil, errors.New("queue mode needs the leaky_bucket algorithm")
	}
	ak := func(dst []byte, _ view, _ netip.Addr) ([]byte, bool) { return dst, true }
	if key != nil {
		ak = func(dst []byte, v view, ip netip.Addr) ([]byte, bool) {
			k, ok := key(v.r, ip)
			return appendPart(dst, k), ok
		}
	}
	return &Rule{Name: name, Limit: limit, Mode: mode, match: matchAll, key: ak, prefix: keyPrefix(name, limit),
		Cost: Cost{Fixed: 1, Default: 1}, Refused: defaultRefusal()}, nil
}

func matchAll(view) bool { return true }

// Matches reports whether r falls under the rule.
func (rl *Rule) Matches(r *http.Request) bool {
	v := newView(r)
	return rl.match(v)
}

// Key returns the store key for r, or false when the rule does not apply
// to it (a missing header under on_missing_key: skip). The key is the
// prefix of the limit that applies (the rule's, or an override's or
// tier's: MatchOf) followed by the key parts, each at most 64 bytes
// (longer values are replaced by their hash).
func (rl *Rule) Key(r *http.Request, ip netip.Addr) (string, bool) {
	var buf [128]byte
	k, ok := rl.AppendKey(buf[:0], r, ip)
	if !ok {
		return "", false
	}
	return string(k), true
}

// AppendKey is Key appending to dst, for callers that reuse a buffer.
func (rl *Rule) AppendKey(dst []byte, r *http.Request, ip netip.Addr) ([]byte, bool) {
	dst, _, ok := rl.appendMatchKey(dst, newView(r), ip)
	return dst, ok
}

func (rl *Rule) appendKey(dst []byte, v view, ip netip.Addr) ([]byte, bool) {
	return rl.key(append(dst, rl.prefix...), v, ip)
}

// maxPart is the longest key part kept as written.
const maxPart = 64

// BoundKey returns s if it is at most 64 bytes, free of '|', '{' and '}'
// and not starting with '#'. Else it returns "#" and a hash of s. So a
// client cannot grow memory with a huge header, forge another key's parts,
// nor choose its key's Redis Cluster slot with a hash tag.
func BoundKey(s string) string {
	return string(appendPart(nil, s))
}

// keyPrefix is "name:hash:" where hash identifies the limit, so that a
// changed limit starts with fresh counters and two rules never share one.
// A calendar window's unit, time zone and offset are part of its limit.
func keyPrefix(name string, l ratekeeper.Limit) string {
	h := limitHex(l)
	return name + ":" + string(h[:]) + ":"
}

// limitHex is the hash of l in a key's prefix: eight hex digits of the
// SHA-256 of its fields. It does not allocate.
func limitHex(l ratekeeper.Limit) [8]byte {
	var arr [192]byte
	b := append(arr[:0], l.Algorithm...)
	for _, n := range [...]int64{int64(l.Rate), int64(l.Period), int64(l.Burst)} {
		b = strconv.AppendInt(append(b, '|'), n, 10)
	}
	b = strconv.AppendBool(append(b, '|'), l.Stagger)
	b = strconv.AppendBool(append(b, '|'), l.LogRejected)
	if l.Calendar != "" { // so that an epoch limit's keys stay as they were
		b = append(append(append(b, '|'), l.Calendar...), '|')
		b = append(append(b, l.Location.String()...), '|')
		b = strconv.AppendInt(b, int64(l.Offset), 10)
	}
	h := sha256.Sum256(b)
	var out [8]byte
	hex.Encode(out[:], h[:4])
	return out
}

// KeyPrefix is the start of every key of the rule: its name and a hash of
// its limit.
func (rl *Rule) KeyPrefix() string { return rl.prefix }

// DisplayKey is key, one of the rule's keys, as the admin shows it: its
// parts joined by '|', an IP as the masked address, a header value as a
// fingerprint unless the rule has show_key. A fingerprint is stable across
// gateways and restarts, and gives an API key no one can use.
func (rl *Rule) DisplayKey(key string) string {
	rest, ok := strings.CutPrefix(key, rl.Name+":")
	switch {
	case !ok:
		return Fingerprint(key)
	case strings.HasPrefix(rest, "cc:"): // a concurrency rule's
		rest = rest[3:]
	case len(rest) >= 9 && rest[8] == ':': // the limit's hash: the rule's, an override's or a tier's
		rest = rest[9:]
	}
	if !strings.Contains(rest, "h=") {
		return rest
	}
	parts := strings.Split(rest, "|")
	for i, p := range parts {
		if v, ok := strings.CutPrefix(p, "h="); ok {
			parts[i] = v // as the key holds it: hashed if long or with '|' or braces
			if !rl.Config.ShowKey {
				parts[i] = Fingerprint(v)
			}
		}
	}
	return strings.Join(parts, "|")
}

// Fingerprint is v hashed for display: "fp:" and 12 hex digits of its
// SHA-256.
func Fingerprint(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "fp:" + hex.EncodeToString(sum[:6])
}

// Describe says in one line what the rule does.
func (rl *Rule) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", rl.Name)
	c := rl.Config
	b.WriteString(strings.Join(describeMatch(c.Match), ", "))
	key := "one global key"
	if len(c.Key) > 0 && !(len(c.Key) == 1 && c.Key[0] == "global") {
		key = "per " + strings.Join(c.Key, " + ")
	}
	if rl.IsConcurrency() {
		fmt.Fprintf(&b, "; %s; %s", key, describeConcurrency(rl.Concurrency))
	} else {
		fmt.Fprintf(&b, "; %s; %s", key, describeLimit(rl.Limit))
	}
	rl.describeRefusal(&b)
	rl.describeCost(&b)
	for _, a := range rl.Alts {
		if a.Tier {
			fmt.Fprintf(&b, "; tier %q (%s from a trusted proxy): %s", a.Name, rl.tierHeader, describeLimit(a.Limit))
		} else {
			fmt.Fprintf(&b, "; client %q: %s", a.Name, describeLimit(a.Limit))
		}
	}
	if rl.offsetHeader != "" {
		fmt.Fprintf(&b, "; a client's boundaries moved by the offset in %s from a trusted proxy", rl.offsetHeader)
	}
	if rl.Refused.HideHeaders {
		b.WriteString("; not shown in the rate limit headers")
	}
	if rl.Refused.Jitter > 0 {
		fmt.Fprintf(&b, "; Retry-After plus up to %v at random", rl.Refused.Jitter)
	}
	if hasHeaderKey(c.Key) {
		b.WriteString(describeMissing(c.OnMissingKey))
	}
	return b.String()
}

// describeMatch lists the conditions of m, or "every request".
func describeMatch(m MatchConfig) []string {
	var conds []string
	if len(m.Methods) > 0 {
		conds = append(conds, strings.Join(upper(m.Methods), "|"))
	}
	if m.Path != "" {
		conds = append(conds, "path = "+m.Path)
	}
	if m.PathPrefix != "" {
		conds = append(conds, "path under "+m.PathPrefix)
	}
	if (m.Path != "" || m.PathPrefix != "") && m.StrictPath {
		conds = append(conds, "strictly")
	}
	if len(m.Hosts) > 0 {
		conds = append(conds, "host in "+strings.Join(m.Hosts, ", "))
	}
	for _, h := range slices.Sorted(mapKeys(m.Headers)) {
		switch v := m.Headers[h]; v {
		case "*":
			conds = append(conds, "header "+h+" present")
		case "":
			conds = append(conds, "header "+h+" absent")
		default:
			conds = append(conds, fmt.Sprintf("header %s = %q", h, v))
		}
	}
	for _, h := range m.AbsentHeaders {
		conds = append(conds, "header "+h+" absent")
	}
	if len(conds) == 0 {
		conds = append(conds, "every request")
	}
	return conds
}

// describeRefusal writes what the rule's mode does beyond the limit.
func (rl *Rule) describeRefusal(b *strings.Builder) {
	switch rl.Mode {
	case Shadow:
		b.WriteString("; shadow: counted and reported, never refused")
	case Queue:
		if rl.MaxDelay > 0 {
			fmt.Fprintf(b, "; queue: held FIFO up to %v, refused beyond", rl.MaxDelay)
		} else {
			fmt.Fprintf(b, "; queue: held FIFO up to %d waiting, refused beyond", rl.Limit.Capacity())
		}
	case Enforce:
		if rl.OverLimit.Action != Refuse {
			rl.describeOverLimit(b)
			return
		}
		fmt.Fprintf(b, "; %d beyond", rl.Refused.Status)
		if rl.Ban > 0 {
			fmt.Fprintf(b, ", and the key is banned for %v", rl.Ban)
		}
	}
}

// describeCost writes what a request costs, when it is not 1.
func (rl *Rule) describeCost(b *strings.Builder) {
	switch c := rl.Cost; {
	case c.Header != "":
		fmt.Fprintf(b, "; a request costs its %s header (1..%d; %d without it)", c.Header, c.Max, c.Default)
	case c.Response != "":
		fmt.Fprintf(b, "; a request needs %s, then costs the upstream's %s response header (0..%d; %d without it)", c.needs(), c.Response, c.Max, c.Default)
	case len(c.JSON) > 0:
		fmt.Fprintf(b, "; a request needs %s, then costs %s in the response body (0..%d; %d without it)", c.needs(), strings.Join(c.JSON, " + "), c.Max, c.Default)
	case c.Fixed != 1:
		fmt.Fprintf(b, "; a request costs %d", c.Fixed)
	}
}

// needs is what a cost charged after the response reserves, in words.
func (c *Cost) needs() string {
	if c.ReserveJSON == "" {
		return units(max(c.Reserve, 1))
	}
	return fmt.Sprintf("its body's %s (1..%d; %d without it)", c.ReserveJSON, c.Max, c.Reserve)
}

// units is n units in words.
func units(n int) string {
	if n <= 1 {
		return "1 unit"
	}
	return strconv.Itoa(n) + " units"
}

// describeMissing says how requests without the key's header are counted.
func describeMissing(onMissingKey string) string {
	switch onMissingKey {
	case "skip":
		return "; requests without the header are not limited by this rule"
	case "shared":
		return "; requests without the header share one counter"
	}
	return "; requests without the header are keyed by client IP"
}

func describeLimit(l ratekeeper.Limit) string {
	per := Duration(l.Period).String()
	switch l.Algorithm {
	case ratekeeper.TokenBucket:
		return fmt.Sprintf("token bucket: %d per %s, bursts of %d", l.Rate, per, l.Capacity())
	case ratekeeper.LeakyBucket:
		return fmt.Sprintf("leaky bucket: drains %d per %s, holds %d", l.Rate, per, l.Capacity())
	case ratekeeper.FixedWindow:
		if l.Calendar != "" {
			return "fixed window: " + describeCalendar(l)
		}
		return fmt.Sprintf("fixed window: %d per %s window", l.Rate, per)
	case ratekeeper.SlidingLog:
		return fmt.Sprintf("sliding log: %d in any %s", l.Rate, per)
	default:
		return fmt.Sprintf("sliding window counter: about %d in any %s", l.Rate, per)
	}
}

// describeCalendar says what a calendar window admits and when it resets:
// "10000 per month in Europe/Berlin, from the 15th".
func describeCalendar(l ratekeeper.Limit) string {
	unit := map[ratekeeper.Calendar]string{ratekeeper.Daily: "day", ratekeeper.Weekly: "week (from Monday)", ratekeeper.Monthly: "month", ratekeeper.Yearly: "year"}[l.Calendar]
	zone := "UTC"
	if l.Location != nil {
		zone = l.Location.String()
	}
	s := fmt.Sprintf("%d per calendar %s in %s", l.Rate, unit, zone)
	if l.Offset != 0 {
		s += ", boundaries moved " + Duration(l.Offset).String() + " later"
	}
	return s
}

func hasHeaderKey(parts []string) bool {
	for _, p := range parts {
		if strings.HasPrefix(strings.ToLower(p), "header:") {
			return true
		}
	}
	return false
}

func upper(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strings.ToUpper(v)
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Set is a compiled configuration: the rules in order, the access lists,
// and how to find the client IP. It is immutable and safe for concurrent
// use.
type Set struct {
	// Rules in the order written.
	Rules []*Rule
	// Headers is the header style the configuration asks for.
	Headers HeaderStyle
	// Config is the configuration it was compiled from (nil for sets built
	// with NewSet).
	Config *Config

	clientIP ClientIP
	allow    []netip.Prefix
	deny     []netip.Prefix
	proxied  []string // the rules' tier and offset headers, canonical, each once
	over     []string // the rules' over_limit headers, canonical, each once
	reroutes []string // the rules' over_limit upstreams, each once
	// drop is DropNames: over's names in lower case, then proxied's.
	drop []string
	// byPath indexes the rules that match one exact path; others lists the
	// rest. Both hold rule indexes in order, so Match visits only the rules
	// that can match and keeps the written order.
	byPath map[string][]int
	others []int
}

// ProxyHeaders are the headers the rules believe from trusted proxies
// only, canonical: tiers.header and offset_header. A gateway passes them
// on from trusted proxies only, as it does X-Forwarded-For. The slice is
// the set's.
func (s *Set) ProxyHeaders() []string { return s.proxied }

// DropNames are the header names, in lower case, that a relay leaves out
// of a request it forwards: the over_limit headers, and from a client the
// rules do not trust, the proxy headers too. The slice is the set's.
func (s *Set) DropNames(trusted bool) []string {
	if trusted {
		return s.drop[:len(s.over):len(s.over)]
	}
	return s.drop
}

// index builds byPath, others, proxied, over, reroutes and drop.
func (s *Set) index() {
	s.byPath = map[string][]int{}
	s.others = s.others[:0]
	s.proxied = s.proxied[:0]
	s.over, s.reroutes = s.over[:0], s.reroutes[:0]
	for i, rl := range s.Rules {
		for _, h := range [...]string{rl.tierHeader, rl.offsetHeader} {
			if h != "" && !slices.Contains(s.proxied, h) {
				s.proxied = append(s.proxied, h)
			}
		}
		if h := rl.OverLimit.Header; h != "" && !slices.Contains(s.over, h) {
			s.over = append(s.over, h)
		}
		if u := rl.OverLimit.Upstream; u != "" && !slices.Contains(s.reroutes, u) {
			s.reroutes = append(s.reroutes, u)
		}
		if p := rl.Config.Match.Path; p != "" {
			p = cleanPath(p)
			if !rl.Config.Match.StrictPath {
				p = loosePath(p)
			}
			s.byPath[p] = append(s.byPath[p], i)
		} else {
			s.others = append(s.others, i)
		}
	}
	s.drop = s.drop[:0]
	for _, h := range append(slices.Clip(s.over), s.proxied...) {
		s.drop = append(s.drop, strings.ToLower(h))
	}
}

// NewSet builds a Set from rules built with NewRule (the middleware's
// programmatic form). Names must be distinct, a rule with CountOnly must
// enforce a rate limit of cost 1, and an OverLimit must be one a file
// could write (a canonical header name).
func NewSet(clientIP ClientIP, rules ...*Rule) (*Set, error) {
	seen := map[string]bool{}
	s := &Set{clientIP: clientIP}
	for i, r := range rules {
		if seen[r.Name] {
			return nil, fmt.Errorf("rule %q appears twice", r.Name)
		}
		seen[r.Name] = true
		if err := r.checkCountOnly(); err != nil {
			return nil, err
		}
		if err := r.checkOverLimit(); err != nil {
			return nil, err
		}
		rc := *r
		rc.Index = i
		s.Rules = append(s.Rules, &rc)
	}
	s.index()
	return s, nil
}

// Compile builds the Set that c describes, or reports every problem in it.
// Configs from Parse and LoadFile are valid already.
func Compile(c *Config) (*Set, error) {
	s, errs := c.build()
	if len(errs) > 0 {
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = e
		}
		return nil, errors.Join(out...)
	}
	return s, nil
}

// Validate reports every problem in c (without lines: use Parse for those).
func (c *Config) Validate() error {
	_, err := Compile(c)
	return err
}

// Problems lists every problem in c, each an *Error with the path of its
// field and no file or line. It is for a decoder of a file that holds a
// rules file's fields among others (the gateway's).
func (c *Config) Problems() []*Error {
	_, errs := c.build()
	return errs
}

// ClientIP returns the resolver of client addresses.
func (s *Set) ClientIP() ClientIP { return s.clientIP }

// StoreModes is the store mode ("exact", "sync" or "lease") each limit
// asks for through a rule's store_mode; limits without one are missing.
func (s *Set) StoreModes() map[ratekeeper.Limit]string {
	m := map[ratekeeper.Limit]string{}
	for _, r := range s.Rules {
		if r.Ban > 0 {
			m[r.BanLimit()] = "exact"
		}
		if r.StoreMode != "" {
			m[r.Limit] = r.StoreMode
			for _, a := range r.Alts {
				m[a.Limit] = r.StoreMode
			}
		}
	}
	return m
}

// Access says whether ip is denied (403) or exempt (on the allow list).
func (s *Set) Access(ip netip.Addr) (denied, exempt bool) {
	for _, p := range s.deny {
		if p.Contains(ip) {
			return true, false
		}
	}
	for _, p := range s.allow {
		if p.Contains(ip) {
			return false, true
		}
	}
	return false, false
}

// Match is one rule applying to one request, with the request's key.
type Match struct {
	Rule *Rule
	Key  string
	// Alt is 0 when the rule's own limit applies to the key, else 1 + the
	// index in Rule.Alts of the override or tier that does (Limit).
	Alt int
	// Offset replaces that limit's calendar offset when OwnOffset: the
	// client's own, from a trusted proxy's offset_header.
	Offset time.Duration
	// OwnOffset says that Offset applies.
	OwnOffset bool
	// BadOffset says that a trusted proxy's offset_header was no offset of
	// the limit (malformed, negative or too long): the limit's own applies.
	BadOffset bool
}

// Match appends to dst the rules r falls under, in order, with their keys.
func (s *Set) Match(dst []Match, r *http.Request, ip netip.Addr) []Match {
	dst, _ = s.AppendMatches(dst, nil, r, ip)
	return dst
}

// AppendMatches is Match building keys in buf, which it returns grown for
// reuse: a caller that keeps buf between requests allocates one string per
// request, which the keys of all its matches share.
func (s *Set) AppendMatches(dst []Match, buf []byte, r *http.Request, ip netip.Addr) ([]Match, []byte) {
	// The keys are built one after another in buf; one conversion at the
	// end makes them strings.
	var endsArr [8]int
	ends := endsArr[:0]
	buf = buf[:0]
	v := newView(r)
	// The rules indexed by path are under their strict path or their loose
	// one: the request's two forms find both (one lookup when they are the
	// same). Each rule's own condition decides.
	exact, loose, others := s.byPath[v.path], []int(nil), s.others
	if v.loose != v.path {
		loose = s.byPath[v.loose]
	}
	for len(exact) > 0 || len(loose) > 0 || len(others) > 0 {
		i := int(^uint(0) >> 1)
		for _, l := range [...][]int{exact, loose, others} {
			if len(l) > 0 && l[0] < i {
				i = l[0]
			}
		}
		for _, l := range [...]*[]int{&exact, &loose, &others} {
			if len(*l) > 0 && (*l)[0] == i {
				*l = (*l)[1:]
			}
		}
		rl := s.Rules[i]
		if !rl.match(v) {
			continue
		}
		var m Match
		var ok bool
		if buf, m, ok = rl.appendMatchKey(buf, v, ip); ok {
			dst = append(dst, m)
			ends = append(ends, len(buf))
		}
	}
	if len(ends) > 0 {
		all, start := string(buf), 0
		first := len(dst) - len(ends)
		for i, end := range ends {
			dst[first+i].Key = all[start:end]
			start = end
		}
	}
	return dst, buf
}

// MatchOf returns the Match that Set.Match gives r under rl, whether or
// not rl's match covers r: its key, and the override or tier whose limit
// applies. It returns false when r has no key (on_missing_key: skip).
func (rl *Rule) MatchOf(r *http.Request, ip netip.Addr) (Match, bool) {
	buf, m, ok := rl.appendMatchKey(nil, newView(r), ip)
	if !ok {
		return Match{}, false
	}
	m.Key = string(buf)
	return m, true
}

// appendMatchKey appends to dst the key of the request v under rl, and
// returns its Match without Key: the override or tier that applies, and
// the client's own offset. It returns dst unchanged and false when the
// request has no key.
func (rl *Rule) appendMatchKey(dst []byte, v view, ip netip.Addr) ([]byte, Match, bool) {
	start := len(dst)
	dst, ok := rl.appendKey(dst, v, ip)
	if !ok {
		return dst[:start], Match{}, false
	}
	m := Match{Rule: rl}
	if rl.Alts != nil {
		// An override or a tier: the same parts under its limit's
		// prefix, as long as the rule's.
		if m.Alt = rl.pickAlt(dst[start:], v); m.Alt > 0 {
			copy(dst[start:], rl.Alts[m.Alt-1].prefix)
		}
	}
	if rl.offsetHeader != "" {
		rl.clientOffset(&m, v)
		if m.OwnOffset {
			// The limit's hash in the prefix, for the client's offset.
			h := rl.offsetHex(m.Alt, m.Limit())
			copy(dst[start+len(rl.Name)+1:], h[:])
		}
	}
	return dst, m, true
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func checkName(n string) error {
	if n == "" {
		return errors.New("is missing")
	}
	if !namePattern.MatchString(n) {
		return fmt.Errorf("%q: use letters, digits, '.', '_' and '-', at most 64, starting with a letter or digit", n)
	}
	return nil
}

// HeadersRead returns the canonical names of the request headers that
// matching and keying read. They are those the rules name, and the
// forwarding header when proxies are trusted. all is true when that is not
// known: a Set built with NewSet, whose key functions may read anything. A server
// that hands the Set a request carrying only these headers gets the same
// decisions as with the whole request.
func (s *Set) HeadersRead() (names []string, all bool) {
	if s.Config == nil {
		return nil, true
	}
	add := func(n string) {
		n = http.CanonicalHeaderKey(strings.TrimSpace(n))
		if n == "Host" {
			return // the request's Host, which every server reads apart
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(s.clientIP.Trusted) > 0 {
		if s.clientIP.Header == "Forwarded" {
			add("Forwarded")
		} else {
			add("X-Forwarded-For")
		}
	}
	for _, rl := range s.Config.Rules {
		if len(rl.Match.Methods) > 0 || hasMethodKey(rl.Key) {
			// A POST's method override (methodOverride).
			add("X-Http-Method-Override")
			add("X-Http-Method")
			add("X-Method-Override")
		}
		for _, p := range rl.Key {
			if kind, arg, _ := strings.Cut(p, ":"); strings.EqualFold(strings.TrimSpace(kind), "header") {
				add(arg)
			}
		}
		for n := range rl.Match.Headers {
			add(n)
		}
		for _, n := range rl.Match.AbsentHeaders {
			add(n)
		}
		if rl.Tiers.Header != "" {
			add(rl.Tiers.Header)
		}
		if rl.OffsetHeader != "" {
			add(rl.OffsetHeader)
		}
		if rl.Cost.Header != "" {
			add(rl.Cost.Header)
		}
	}
	return names, false
}

// hasMethodKey reports whether key parts read the method.
func hasMethodKey(parts []string) bool {
	for _, p := range parts {
		if k := strings.ToLower(strings.TrimSpace(p)); k == "method" || k == "route" {
			return true
		}
	}
	return false
}
