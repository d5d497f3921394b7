package rules

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/jsonmeter"
)

// Cost is what a request takes from a rule's limit: Fixed units, or a
// number read from a request header (Header) or from the upstream's
// response (Response), bounded by Max.
type Cost struct {
	// Fixed is the cost when no header is named: 1 unless the file says
	// otherwise.
	Fixed int
	// Header is the canonical name of the request header that gives the
	// cost, or "".
	Header string
	// Response is the canonical name of the response header that gives the
	// cost, charged once the upstream answered, or "".
	Response string
	// JSON are the paths (usage.total_tokens) whose numbers, summed, are
	// the cost, read from the response body; none when empty.
	JSON []string
	// Max is the largest cost a header may give.
	Max int
	// Default is the cost when the header is missing (and, for Response,
	// when its value is not a whole number in 0..Max); see Unread for a
	// cost with a reserve.
	Default int
	// Reserve is what a request whose cost comes after the response
	// (AfterResponse) takes at admission: 0 when the file gives none, and
	// such a request takes 1. With ReserveJSON it is the reserve of a body
	// that does not give one.
	Reserve int
	// ReserveJSON is the path (max_tokens) of the number in the request's
	// JSON body that is the reserve, or "".
	ReserveJSON string

	paths   []jsonmeter.Path // JSON, compiled
	reserve []jsonmeter.Path // ReserveJSON, compiled
}

// CostError is a request's cost header that cannot be read: the request
// is refused with 400, and the error says why.
type CostError struct {
	Header string // canonical name
	Max    int
	Reason string // "is not a whole number", "appears twice", ...
}

func (e *CostError) Error() string {
	return fmt.Sprintf("the %s header gives this request's cost and must be one whole number from 1 to %d: it %s", e.Header, e.Max, e.Reason)
}

// Request is the cost of r: Fixed, or the value of Header (Default when
// it is missing). A value that is not one whole number in 1..Max is an
// error (*CostError). A cost charged after the response takes Reserve
// now.
func (c *Cost) Request(h http.Header) (int, error) {
	if c.Header == "" {
		if c.AfterResponse() {
			return max(c.Reserve, 1), nil
		}
		return c.Fixed, nil
	}
	vs := h[c.Header]
	switch {
	case len(vs) == 0:
		return c.Default, nil
	case len(vs) > 1:
		return 0, &CostError{c.Header, c.Max, "appears more than once"}
	}
	n, ok := parseCost(vs[0])
	switch {
	case !ok:
		return 0, &CostError{c.Header, c.Max, "is not a whole number"}
	case n < 1:
		return 0, &CostError{c.Header, c.Max, "is below 1"}
	case n > int64(c.Max):
		return 0, &CostError{c.Header, c.Max, "is above " + strconv.Itoa(c.Max)}
	}
	return int(n), nil
}

// FromResponse is the cost a response with header h says it had, when
// its request took taken at admission. It is the value of Response when
// that is one whole number in 0..Max, and Max for a larger one. It is
// Unread(taken) when the header is missing, repeated, not a number or
// negative. ok is false when the header was there but unreadable.
func (c *Cost) FromResponse(h http.Header, taken int) (n int, ok bool) {
	vs := h[c.Response]
	if len(vs) == 0 {
		return c.Unread(taken), true
	}
	v, good := int64(0), len(vs) == 1
	if good {
		v, good = parseCost(vs[0])
	}
	if !good || v < 0 {
		return c.Unread(taken), false
	}
	return int(min(v, int64(c.Max))), true
}

// parseCost reads an optionally signed decimal integer between optional
// spaces and tabs; huge values saturate.
func parseCost(s string) (int64, bool) {
	s = strings.Trim(s, " \t")
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "" || len(s) > 30 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int64(c-'0'), 1<<53)
	}
	if neg {
		n = -n
	}
	return n, true
}

// Alt is a limit that replaces a rule's own for some requests: an
// override, for one client (by key), or a tier, by a header a trusted
// proxy wrote.
type Alt struct {
	// Tier is true for a tier, false for an override.
	Tier bool
	// Name is the override's key value or the tier's name.
	Name string
	// Limit is applied instead of the rule's.
	Limit ratekeeper.Limit

	prefix    string // keyPrefix(rule name, Limit)
	field     string // where the file writes it
	ownOffset bool   // an override that writes its offset: offset_header does not move it
}

// Limit is the limit that applies to the match's key: its rule's, or the
// override's or tier's that replaces it, moved by the client's own offset
// when OwnOffset.
func (m *Match) Limit() ratekeeper.Limit {
	l := m.Rule.Limit
	if m.Alt > 0 {
		l = m.Rule.Alts[m.Alt-1].Limit
	}
	if m.OwnOffset {
		l.Offset = m.Offset
	}
	return l
}

// pickAlt returns 1 + the index in rl.Alts of the limit for the request
// whose key (rl.prefix and parts) is key, or 0 for the rule's own. That
// limit is the key's override, else the tier the tier header names when
// the TCP peer is a trusted proxy.
func (rl *Rule) pickAlt(key []byte, v view) int {
	if rl.overrides != nil {
		if i, ok := rl.overrides[string(key[len(rl.prefix):])]; ok {
			return i
		}
	}
	if rl.tierHeader != "" {
		if vs := v.r.Header[rl.tierHeader]; len(vs) == 1 && rl.clientIP.Trusts(v.r) {
			if i, ok := rl.tiers[strings.Trim(vs[0], " \t")]; ok {
				return i
			}
		}
	}
	return 0
}

// overrideLimit is an override's or tier's limit. It takes the rule's
// algorithm, period, stagger and log_rejected unless it writes them. It
// takes the rule's calendar unless it writes a period. With a calendar, it
// takes the rule's time zone, and its offset if the unit is the rule's,
// unless it writes them.
func overrideLimit(rule, lc LimitConfig) LimitConfig {
	if lc.Algorithm == "" {
		lc.Algorithm = rule.Algorithm
	}
	if lc.Calendar == "" && lc.Period == 0 {
		lc.Calendar = rule.Calendar
	}
	if lc.Calendar != "" {
		lc.TimeZone = cmp.Or(lc.TimeZone, rule.TimeZone)
	}
	if lc.Calendar == rule.Calendar && lc.Calendar != "" && lc.Offset == nil {
		lc.Offset = rule.Offset // an offset is bounded by its unit
	}
	if lc.Period == 0 && lc.Calendar == "" {
		lc.Period = rule.Period
	}
	a := ratekeeper.Algorithm(lc.Algorithm)
	if rule.Stagger && (a == ratekeeper.FixedWindow || a == ratekeeper.SlidingWindow) {
		lc.Stagger = true
	}
	if rule.LogRejected && a == ratekeeper.SlidingLog {
		lc.LogRejected = true
	}
	return lc
}

// buildAlts compiles a rule's overrides and tiers into rl.Alts.
func buildAlts(at string, rc RuleConfig, rl *Rule, ci ClientIP, fail func(string, string, ...any)) {
	add := func(field string, tier bool, name string, lc LimitConfig) int {
		own := !tier && lc.Offset != nil
		lc = overrideLimit(rc.Limit, lc)
		l := limitOf(lc)
		checkLimit(field, lc, l, fail)
		rl.Alts = append(rl.Alts, Alt{Tier: tier, Name: name, Limit: l, prefix: keyPrefix(rc.Name, l), field: field, ownOffset: own})
		return len(rl.Alts)
	}
	if len(rc.Overrides) > 0 {
		encode, err := overrideKey(rc.Key, ci)
		if err != nil {
			fail(at+".overrides", "%v", err)
		} else {
			rl.overrides = map[string]int{}
			for _, k := range slices.Sorted(mapKeys(rc.Overrides)) {
				field := at + ".overrides." + k
				enc, err := encode(k)
				if err != nil {
					fail(field, "%v", err)
					continue
				}
				if _, dup := rl.overrides[enc]; dup {
					fail(field, "is the same client as another override")
					continue
				}
				rl.overrides[enc] = add(field, false, k, rc.Overrides[k])
			}
		}
	}
	t := rc.Tiers
	if t.Header == "" && len(t.Limits) > 0 {
		fail(at+".tiers.header", "is missing: the header a trusted proxy writes the tier's name in")
	}
	if t.Header != "" {
		name := proxyHeader(at+".tiers.header", t.Header, ci, "choose a tier", fail)
		if name != "" && len(t.Limits) == 0 {
			fail(at+".tiers.limits", "is missing: the limit of each tier")
		}
		rl.tierHeader = name
		rl.tiers = map[string]int{}
		for _, k := range slices.Sorted(mapKeys(t.Limits)) {
			field := at + ".tiers.limits." + k
			if k == "" || strings.Trim(k, " \t") != k || strings.ContainsAny(k, ",\"") {
				fail(field, "%q: a tier's name has no commas, quotes or surrounding spaces", k)
				continue
			}
			rl.tiers[k] = add(field, true, k, t.Limits[k])
		}
	}
}

// proxyHeader is the canonical name of h, a header that only a trusted
// proxy may write, or "" after failing at field. what says what the
// header does, for the error without trusted proxies.
func proxyHeader(field, h string, ci ClientIP, what string, fail func(string, string, ...any)) string {
	name := http.CanonicalHeaderKey(strings.TrimSpace(h))
	switch {
	case !validHeaderName(name) || name == "":
		fail(field, "%q is not a header name", h)
	case checkRuleHeader(name) != nil:
		fail(field, "%v", checkRuleHeader(name))
	case name == "Host":
		fail(field, "Host is written by the client, not by a proxy")
	case len(ci.Trusted) == 0:
		fail(field, "is believed only from client_ip.trusted_proxies, and there are none: no request could %s", what)
	default:
		return name
	}
	return ""
}

// overrideKey returns the function that encodes an override's key value
// as the rule's key parts are encoded, for a key of one part: a header,
// the client IP or the host.
func overrideKey(parts []string, ci ClientIP) (func(string) (string, error), error) {
	if len(parts) != 1 {
		return nil, fmt.Errorf("overrides need a key of one part (header:NAME, ip or host), not %d", len(parts))
	}
	kind, arg, _ := strings.Cut(parts[0], ":")
	kind = strings.ToLower(strings.TrimSpace(kind))
	if kind == "header" && http.CanonicalHeaderKey(strings.TrimSpace(arg)) == "Host" {
		kind = "host"
	}
	switch kind {
	case "header":
		return func(k string) (string, error) {
			if k == "" {
				return "", errors.New("an empty value is a missing header (on_missing_key), not a client")
			}
			return string(appendPart([]byte("h="), k)), nil
		}, nil
	case "host":
		return func(k string) (string, error) {
			return string(appendPart(nil, canonicalHost(k))), nil
		}, nil
	case "ip":
		return func(k string) (string, error) {
			p, err := ParsePrefix(k)
			if err != nil {
				return "", err
			}
			bits := ci.IPv6Prefix
			if p.Addr().Is4() {
				bits = ci.IPv4Prefix
			}
			if p.Bits() != p.Addr().BitLen() && p.Bits() != bits {
				return "", fmt.Errorf("%q: keys are addresses masked to /%d, so an override is one address or a /%d", k, bits, bits)
			}
			return string(ci.AppendKey(nil, p.Addr())), nil
		}, nil
	}
	return nil, fmt.Errorf("overrides need a key of one part, header:NAME, ip or host, not %q", parts[0])
}

// buildCost compiles a rule's cost.
func buildCost(at string, rc RuleConfig, rl *Rule, fail func(string, string, ...any)) Cost {
	cc := rc.Cost
	c := Cost{Fixed: 1, Default: 1, Max: cc.Max, Reserve: cc.Reserve.N}
	if cc.Fixed > 0 {
		c.Fixed = cc.Fixed
	}
	if cc.Default != nil {
		c.Default = *cc.Default
	}
	at += ".cost"
	header := func(field, h string) string {
		name := http.CanonicalHeaderKey(strings.TrimSpace(h))
		if !validHeaderName(name) || name == "" {
			fail(at+"."+field, "%q is not a header name", h)
		} else if err := checkRuleHeader(name); err != nil {
			fail(at+"."+field, "%v", err)
		}
		return name
	}
	limits := append([]Alt{{Limit: rl.Limit, field: at}}, rl.Alts...)
	switch {
	case cc.Header != "" && cc.ResponseHeader != "":
		fail(at+".response_header", "give header or response_header, not both")
	case len(cc.ResponseJSON) > 0 && (cc.Header != "" || cc.ResponseHeader != ""):
		fail(at+".response_json", "give one of header, response_header and response_json")
	case len(cc.ResponseJSON) > 0:
		c.JSON, c.paths = buildPaths(at+".response_json", cc.ResponseJSON, fail)
		checkAfterResponse(at+".response_json", rl, limits, fail)
		if c.Default < 0 || c.Default > cc.Max {
			fail(at+".default", "%d is not in 0..max", c.Default)
		}
	case cc.Header != "":
		c.Header = header("header", cc.Header)
		if c.Header == "Host" {
			fail(at+".header", "Host is not a number")
		}
		if c.Default < 1 || c.Default > cc.Max {
			fail(at+".default", "%d is not in 1..max", c.Default)
		}
	case cc.ResponseHeader != "":
		c.Response = header("response_header", cc.ResponseHeader)
		checkAfterResponse(at+".response_header", rl, limits, fail)
		if c.Default < 0 || c.Default > cc.Max {
			fail(at+".default", "%d is not in 0..max", c.Default)
		}
	default:
		if !cc.Reserve.isZero() {
			fail(at+".reserve", "is taken at admission from a cost charged after the response: give response_header or response_json")
		}
		if cc.Max != 0 {
			fail(at+".max", "bounds a cost read from a header: give header, response_header or response_json")
		}
		if cc.Default != nil {
			fail(at+".default", "is the cost of a request without the header: give header, response_header or response_json")
		}
		for _, a := range limits {
			if c.Fixed > a.Limit.Capacity() && a.Limit.Validate() == nil {
				fail(at, "%d is more than %s allows at once (%d): no request could pass", c.Fixed, cmpOr(a.Name, "the limit"), a.Limit.Capacity())
			}
		}
		return c
	}
	if cc.Max < 1 {
		fail(at+".max", "is missing: the largest cost the header may give, at most the limit's capacity")
	}
	buildReserve(at+".reserve", cc, &c, fail)
	for _, a := range limits {
		if cc.Max > a.Limit.Capacity() && a.Limit.Validate() == nil {
			fail(at+".max", "%d is more than %s allows at once (%d): such a request could never pass", cc.Max, cmpOr(a.Name, "the limit"), a.Limit.Capacity())
		}
	}
	return c
}

// buildReserve compiles the reserve of a cost read from a header or the
// response: only one charged after the response has one.
func buildReserve(at string, cc CostConfig, c *Cost, fail func(string, string, ...any)) {
	rc := cc.Reserve
	switch {
	case rc.isZero():
		return
	case c.Header != "":
		fail(at, "is taken at admission from a cost charged after the response: give response_header or response_json")
	case rc.RequestJSON == "" && (rc.N < 1 || rc.N > cc.Max):
		fail(at, "%d is not in 1..max (%d)", rc.N, cc.Max)
	case rc.RequestJSON == "":
	case rc.Default < 1 || rc.Default > cc.Max:
		fail(at+".default", "%d is not in 1..max (%d): it is the reserve of a request whose body does not give one", rc.Default, cc.Max)
	default:
		p, err := jsonmeter.ParsePath(rc.RequestJSON)
		if err != nil {
			fail(at+".request_json", "path %q %v", rc.RequestJSON, err)
			return
		}
		c.Reserve, c.ReserveJSON, c.reserve = rc.Default, rc.RequestJSON, []jsonmeter.Path{p}
	}
}

// checkAfterResponse fails a cost charged after the response on a rule
// that cannot take it: one not enforced, or a limit without debt.
func checkAfterResponse(field string, rl *Rule, limits []Alt, fail func(string, string, ...any)) {
	if rl.Mode != Enforce {
		fail(field, "a cost charged after the response needs mode enforce, not %s", rl.Mode)
	}
	for _, a := range limits {
		if a.Limit.Algorithm != ratekeeper.TokenBucket && a.Limit.Algorithm.Valid() {
			fail(field, "a cost charged after the response needs the token_bucket algorithm, whose debt makes later requests wait; %s has %s", cmpOr(a.Name, "the rule"), a.Limit.Algorithm)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Refusal is the answer to a request a rule refuses.
type Refusal struct {
	// Status is the status code: 429 unless the file says otherwise.
	Status int
	// Type and Title are the problem+json type and title.
	Type, Title string
	// HideHeaders leaves the rule out of the rate limit headers.
	HideHeaders bool
	// Jitter is the most added, uniformly at random, to the wait a refusal
	// announces.
	Jitter time.Duration

	detail []string // the template split around its placeholders
}

// detailDefault is the detail when the file writes none.
const detailDefault = `rate limit "{rule}" exceeded: retry in {wait} s`

// AppendDetail appends the refusal's detail for rule with a wait of wait
// seconds.
func (f *Refusal) AppendDetail(dst []byte, rule string, wait int64) []byte {
	d := f.detail
	if d == nil {
		d = defaultDetail
	}
	for _, p := range d {
		switch p {
		case "{rule}":
			dst = append(dst, rule...)
		case "{wait}":
			dst = strconv.AppendInt(dst, wait, 10)
		default:
			dst = append(dst, p...)
		}
	}
	return dst
}

var defaultDetail, _ = splitDetail(detailDefault)

// defaultRefusal is the answer of a rule that says nothing of it.
func defaultRefusal() Refusal {
	return Refusal{Status: http.StatusTooManyRequests, Type: "about:blank", Title: "Too Many Requests"}
}

// splitDetail splits a detail template around {rule} and {wait}; any
// other brace is an error.
func splitDetail(s string) ([]string, error) {
	var out []string
	for s != "" {
		i := strings.IndexAny(s, "{}")
		if i < 0 {
			out = append(out, s)
			break
		}
		if i > 0 {
			out = append(out, s[:i])
			s = s[i:]
		}
		switch {
		case strings.HasPrefix(s, "{rule}"), strings.HasPrefix(s, "{wait}"):
			out = append(out, s[:6])
			s = s[6:]
		default:
			return nil, errors.New("may hold {rule} and {wait}, and no other braces")
		}
	}
	return out, nil
}

// refusalStatuses are the codes a refusal may have: the client errors and
// server errors that say "not now" or "not this". The others carry
// framing, authentication or method semantics. 401 wants
// WWW-Authenticate and 405 Allow. 407, 408, 411, 413, 416, 417, 426 and
// 431 describe the request's form.
var refusalStatuses = []int{400, 402, 403, 404, 409, 410, 418, 420, 422, 423, 425, 429, 500, 502, 503, 504, 507, 509, 529}

// buildRefusal compiles a rule's refused answer.
func buildRefusal(at string, rc RefusedConfig, mode Mode, fail func(string, string, ...any)) Refusal {
	f := defaultRefusal()
	at += ".refused"
	f.HideHeaders = rc.HideHeaders
	if mode == Shadow && (rc.Status != 0 || rc.Type != "" || rc.Title != "" || rc.Detail != "" || rc.RetryAfterJitter != 0) {
		fail(at, "a shadow rule never refuses: only hide_headers applies to it")
	}
	if rc.Status != 0 {
		if !slices.Contains(refusalStatuses, rc.Status) {
			fail(at+".status", "%d is not one of %s", rc.Status, joinInts(refusalStatuses))
		}
		f.Status = rc.Status
		f.Title = http.StatusText(rc.Status)
		if f.Title == "" {
			f.Title = "Refused"
		}
	}
	if rc.Type != "" {
		if u, err := url.Parse(rc.Type); err != nil || !printable(rc.Type) || strings.ContainsAny(rc.Type, " \"") || len(rc.Type) > 512 || u.Scheme == "" {
			fail(at+".type", "%q is not an absolute URI (like https://example.com/problems/rate-limited), at most 512 bytes", rc.Type)
		}
		f.Type = rc.Type
	}
	if rc.Title != "" {
		if !printable(rc.Title) || len(rc.Title) > 200 {
			fail(at+".title", "must be printable text, at most 200 bytes")
		}
		f.Title = rc.Title
	}
	if rc.Detail != "" {
		d, err := splitDetail(rc.Detail)
		switch {
		case err != nil:
			fail(at+".detail", "%v", err)
		case !printable(rc.Detail) || len(rc.Detail) > 512:
			fail(at+".detail", "must be printable text, at most 512 bytes")
		}
		f.detail = d
	}
	if rc.RetryAfterJitter < 0 || time.Duration(rc.RetryAfterJitter) > time.Hour {
		fail(at+".retry_after_jitter", "must be between 0 and 1h")
	}
	f.Jitter = time.Duration(rc.RetryAfterJitter)
	return f
}

// printable reports whether s has no control characters (so that it can
// go nowhere it could end a line).
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == 0x2028 || r == 0x2029 || r == '\uFFFD' {
			return false
		}
	}
	return true
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
