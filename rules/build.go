package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// build compiles c, collecting every problem with the path of its field.
func (c *Config) build() (*Set, []*Error) {
	var errs []*Error
	fail := func(field string, format string, args ...any) {
		errs = append(errs, &Error{Field: field, Err: fmt.Errorf(format, args...)})
	}
	s := &Set{Config: c}
	var err error
	if s.Headers, err = ParseHeaderStyle(c.Headers); err != nil {
		fail("headers", "%v", err)
	}
	s.clientIP = buildClientIP(c.ClientIP, fail)
	s.allow = parsePrefixes("access.allow", c.Access.Allow, fail)
	s.deny = parsePrefixes("access.deny", c.Access.Deny, fail)

	names := map[string]int{}
	modes := storeModes{}
	for i, rc := range c.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		if err := checkName(rc.Name); err != nil {
			fail(at+".name", "%v", err)
		} else if j, dup := names[rc.Name]; dup {
			fail(at+".name", "%q is already the name of rules[%d]", rc.Name, j)
		}
		names[rc.Name] = i
		rl := buildRule(at, i, rc, s.clientIP, fail)
		modes.claim(at+".store_mode", rl.Limit, rl, fail)
		if rl.Ban > 0 {
			modes.claim(at+".ban", rl.BanLimit(), &Rule{Name: rl.Name, StoreMode: "exact"}, fail)
		}
		for _, a := range rl.Alts {
			if rl.Mode == Queue {
				checkQueueAlgorithm(a.field+".algorithm", a.Limit.Algorithm, fail)
			}
			modes.claim(a.field, a.Limit, rl, fail)
		}
		s.Rules = append(s.Rules, rl)
	}
	s.index()
	checkOverHeaders(c, s.over, fail)
	return s, errs
}

// buildClientIP is the client_ip section with its defaults.
func buildClientIP(ci ClientIPConfig, fail func(string, string, ...any)) ClientIP {
	out := ClientIP{IPv4Prefix: 32, IPv6Prefix: 64, Header: "X-Forwarded-For"}
	for _, p := range []struct {
		field    string
		set, max int
		to       *int
	}{
		{"client_ip.ipv4_prefix", ci.IPv4Prefix, 32, &out.IPv4Prefix},
		{"client_ip.ipv6_prefix", ci.IPv6Prefix, 128, &out.IPv6Prefix},
	} {
		if p.set == 0 {
			continue
		}
		if p.set < 1 || p.set > p.max {
			fail(p.field, "%d is not in 1..%d", p.set, p.max)
		}
		*p.to = p.set
	}
	switch strings.ToLower(ci.Header) {
	case "", "x-forwarded-for":
	case "forwarded":
		out.Header = "Forwarded"
	default:
		fail("client_ip.header", "%q is not X-Forwarded-For or Forwarded", ci.Header)
	}
	out.Trusted = parsePrefixes("client_ip.trusted_proxies", ci.TrustedProxies, fail)
	return out
}

// parsePrefixes parses a list of CIDRs or addresses.
func parsePrefixes(field string, list []string, fail func(string, string, ...any)) []netip.Prefix {
	var out []netip.Prefix
	for i, v := range list {
		p, err := ParsePrefix(v)
		if err != nil {
			fail(fmt.Sprintf("%s[%d]", field, i), "%v", err)
			continue
		}
		out = append(out, p)
	}
	return out
}

// buildRule compiles one rule, rules[i] at field at.
func buildRule(at string, i int, rc RuleConfig, ci ClientIP, fail func(string, string, ...any)) *Rule {
	rl := &Rule{Index: i, Name: rc.Name, Config: rc, clientIP: ci}
	conc := rc.Concurrency != nil
	if conc {
		buildConcurrency(at, rc, rl, fail)
	}
	l := limitOf(rc.Limit)
	if !conc { // buildConcurrency checked it: a concurrency rule has no limit
		checkLimit(at+".limit", rc.Limit, l, fail)
	}
	rl.Limit = l
	rl.Mode = parseMode(at, rc, conc, fail)
	if rc.MaxDelay < 0 {
		fail(at+".max_delay", "must not be negative")
	} else if rc.MaxDelay > 0 && rl.Mode != Queue {
		fail(at+".max_delay", "only queue mode waits; set mode: queue or remove max_delay")
	}
	rl.MaxDelay = time.Duration(rc.MaxDelay)
	rl.Ban = buildBan(at, rc, rl.Mode, conc, fail)
	switch rc.StoreMode {
	case "", "exact", "sync", "lease":
		rl.StoreMode = rc.StoreMode
	default:
		fail(at+".store_mode", "%q is not exact, sync or lease", rc.StoreMode)
	}
	key, kerrs := compileKey(rc.Key, parseMissing(at, rc.OnMissingKey, fail), ci, rc.Match.StrictPath)
	for _, e := range kerrs {
		fail(fmt.Sprintf("%s.key[%d]", at, e.i), "%v", e.err)
	}
	rl.key = key
	m, merrs := compileMatch(rc.Match)
	for _, e := range merrs {
		fail(at+".match."+e.field, "%v", e.err)
	}
	rl.match = m
	rl.Refused = buildRefusal(at, rc.Refused, rl.Mode, fail)
	if conc {
		checkNoRateFields(at, rc, fail)
		// A concurrency rule counts requests in flight: no rate to charge a
		// cost against, nor another limit to give a client.
		rl.Cost = Cost{Fixed: 1, Default: 1}
	} else {
		rl.prefix = keyPrefix(rc.Name, l)
		buildAlts(at, rc, rl, ci, fail)
		buildOffsetHeader(at, rc, rl, ci, fail)
		rl.Cost = buildCost(at, rc, rl, fail)
	}
	buildCountOnly(at, rc, rl, fail)
	buildOverLimit(at, rc, rl, fail)
	return rl
}

// parseMode reads a rule's mode; queue mode needs the FIFO queue.
func parseMode(at string, rc RuleConfig, conc bool, fail func(string, string, ...any)) Mode {
	switch rc.Mode {
	case "", "enforce":
		return Enforce
	case "shadow":
		return Shadow
	case "queue":
		if !conc {
			checkQueueAlgorithm(at+".mode", ratekeeper.Algorithm(rc.Limit.Algorithm), fail)
		}
		return Queue
	}
	fail(at+".mode", "%q is not enforce, shadow or queue", rc.Mode)
	return Enforce
}

// checkQueueAlgorithm fails at field unless a is the leaky bucket, the
// only algorithm that queues (FIFO).
func checkQueueAlgorithm(field string, a ratekeeper.Algorithm, fail func(string, string, ...any)) {
	if a != ratekeeper.LeakyBucket {
		fail(field, "queue mode needs the leaky_bucket algorithm (the FIFO queue), not %q", a)
	}
}

// parseMissing reads a rule's on_missing_key.
func parseMissing(at, v string, fail func(string, string, ...any)) Missing {
	switch v {
	case "", "ip":
		return MissingIP
	case "skip":
		return MissingSkip
	case "shared":
		return MissingShared
	}
	fail(at+".on_missing_key", "%q is not ip, skip or shared", v)
	return MissingIP
}

// checkNoRateFields refuses on a concurrency rule the fields of a rate.
func checkNoRateFields(at string, rc RuleConfig, fail func(string, string, ...any)) {
	for _, f := range []struct {
		field string
		set   bool
	}{{"cost", !rc.Cost.isZero()}, {"overrides", len(rc.Overrides) > 0}, {"tiers", rc.Tiers.Header != "" || len(rc.Tiers.Limits) > 0}, {"offset_header", rc.OffsetHeader != ""}} {
		if f.set {
			fail(at+"."+f.field, "applies to rate limits, not to a concurrency rule")
		}
	}
}

// storeModes are the store modes limits are claimed in. The store tells
// limits apart by their value, a time zone by its name: rules with the
// same limit are decided in one mode.
type storeModes map[algo.LimitKey]struct{ rule, mode string }

// claim records that rl decides l in its store_mode, or fails at field if
// another rule decides the same limit in another mode.
func (m storeModes) claim(field string, l ratekeeper.Limit, rl *Rule, fail func(string, string, ...any)) {
	if rl.StoreMode == "" {
		return
	}
	other, ok := m[algo.KeyOf(l)]
	switch {
	case !ok:
		m[algo.KeyOf(l)] = struct{ rule, mode string }{rl.Name, rl.StoreMode}
	case other.mode != rl.StoreMode:
		fail(field, "store_mode %q, but rule %q decides the same limit with store_mode %q: give the two the same mode", rl.StoreMode, other.rule, other.mode)
	}
}

// limitOf is the limit lc writes. An unknown time zone is left nil, for
// checkLimit to report.
func limitOf(lc LimitConfig) ratekeeper.Limit {
	loc, _ := LoadZone(lc.TimeZone)
	return ratekeeper.Limit{
		Algorithm:   ratekeeper.Algorithm(lc.Algorithm),
		Rate:        lc.Rate,
		Period:      time.Duration(lc.Period),
		Burst:       lc.Burst,
		Stagger:     lc.Stagger,
		LogRejected: lc.LogRejected,
		Calendar:    ratekeeper.Calendar(lc.Calendar),
		Location:    loc,
		Offset:      time.Duration(lc.offset()),
	}
}

// LoadZone is the time zone a configuration file names: an IANA name like
// Europe/Berlin, or UTC. "" is nil, which is UTC. "Local" is refused: it
// is the machine's zone, which another machine may not share.
func LoadZone(name string) (*time.Location, error) {
	switch name {
	case "":
		return nil, nil
	case "Local":
		return nil, errors.New(`"Local" is this machine's zone, which another machine may not share: name the zone, like Europe/Berlin`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a time zone: give an IANA name like Europe/Berlin, America/New_York or UTC", name)
	}
	return loc, nil
}

// ZoneData is a fingerprint of loc's rules as this process loaded them:
// eight hex digits of a hash of its UTC offsets and the instants they
// change, from 1970 to 2100. nil is UTC. Processes that show different
// ones for a zone put its calendar boundaries at different instants.
func ZoneData(loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	h := sha256.New()
	t := time.Date(1970, 1, 1, 0, 0, 0, 0, loc)
	end := time.Date(2100, 1, 1, 0, 0, 0, 0, loc)
	last := -1 << 31 // no offset is this far from UTC
	for t.Before(end) {
		if _, off := t.Zone(); off != last {
			fmt.Fprintf(h, "%d %d\n", t.Unix(), off)
			last = off
		}
		_, next := t.ZoneBounds()
		if !next.After(t) {
			break // the zone lasts forever
		}
		t = next
	}
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// calendars lists the calendar units as a file writes them.
const calendars = "daily, weekly, monthly or yearly"

// checkCalendar reports what is wrong with lc's calendar fields, at field
// at. It returns false if it reported anything.
func checkCalendar(at string, lc LimitConfig, fail func(string, string, ...any)) bool {
	c := ratekeeper.Calendar(lc.Calendar)
	n := 0
	bad := func(field, format string, args ...any) { fail(at+"."+field, format, args...); n++ }
	switch {
	case c == "" && lc.TimeZone != "":
		bad("time_zone", "applies to a calendar window: add calendar (%s) or remove time_zone", calendars)
	case c == "" && lc.offset() != 0:
		bad("offset", "applies to a calendar window: add calendar (%s) or remove offset", calendars)
	case c == "":
		return true
	case c.MaxOffset() == 0:
		bad("calendar", "%q is not a calendar; use %s", lc.Calendar, calendars)
		return false
	}
	if _, err := LoadZone(lc.TimeZone); err != nil {
		bad("time_zone", "%v", err)
	}
	if c == "" {
		return n == 0
	}
	if a := ratekeeper.Algorithm(lc.Algorithm); a != ratekeeper.FixedWindow {
		bad("calendar", "%s cannot follow the calendar; use algorithm: fixed_window (docs/algorithms.md says why)", a)
	}
	if lc.Period != 0 {
		bad("period", "a calendar window lasts its %s period: remove period", c)
	}
	if lc.Stagger {
		bad("stagger", "a calendar window is not staggered: remove stagger, or move its boundaries with offset")
	}
	if most, o := Duration(c.MaxOffset()), lc.offset(); o < 0 || o >= most {
		bad("offset", "%s is not in 0 up to less than %s, the unit of a %s calendar", o, most, c)
	}
	return n == 0
}

// checkLimit reports what is wrong with l, which lc (at field) writes.
func checkLimit(at string, lc LimitConfig, l ratekeeper.Limit, fail func(string, string, ...any)) {
	if !checkCalendar(at, lc, fail) {
		return
	}
	if err := l.Validate(); err != nil {
		fail(limitField(at, err), "%v", strings.TrimPrefix(err.Error(), "limit: "))
		return
	}
	// The library ignores what an algorithm does not use; a file that
	// sets it means something that will not happen.
	for _, f := range inapplicable(lc) {
		fail(at+"."+f.field, "only applies to %s, not %s", f.algorithms, l.Algorithm)
	}
}

// inapplicable lists the fields of a valid limit that its algorithm cannot
// use, each with the algorithms it applies to.
func inapplicable(lc LimitConfig) []struct{ field, algorithms string } {
	var out []struct{ field, algorithms string }
	a := ratekeeper.Algorithm(lc.Algorithm)
	if lc.Burst != 0 && a != ratekeeper.TokenBucket && a != ratekeeper.LeakyBucket {
		out = append(out, struct{ field, algorithms string }{"burst", "token_bucket and leaky_bucket"})
	}
	if lc.Stagger && a != ratekeeper.FixedWindow && a != ratekeeper.SlidingWindow {
		out = append(out, struct{ field, algorithms string }{"stagger", "fixed_window and sliding_window"})
	}
	if lc.LogRejected && a != ratekeeper.SlidingLog {
		out = append(out, struct{ field, algorithms string }{"log_rejected", "sliding_log"})
	}
	return out
}

// limitField names the field of the limit at at that an error from
// Limit.Validate is about.
func limitField(at string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "limit: ")
	switch {
	case strings.Contains(msg, "algorithm"):
		return at + ".algorithm"
	case strings.HasPrefix(msg, "burst"):
		return at + ".burst"
	case strings.HasPrefix(msg, "period"):
		return at + ".period"
	case strings.HasPrefix(msg, "rate"):
		return at + ".rate"
	case strings.HasPrefix(msg, "offset"):
		return at + ".offset"
	}
	return at
}

// ParsePrefix reads a CIDR or a single address (as a /32 or /128).
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR like 10.0.0.0/8 or 2001:db8::/32", s)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", s)
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

type keyErr struct {
	i   int
	err error
}

// appendKey appends a request's key to dst, or reports false.
type appendKey func(dst []byte, v view, ip netip.Addr) ([]byte, bool)

// compileKey turns key parts into an appendKey. Parts are joined with '|'
// after each is bounded (appendPart). A part that would contain '|' is
// hashed, so no two different requests produce one key. So is one with a
// brace, so that the store alone places keys on Redis Cluster. The path in
// a key is the form the rule matches (loose unless strict). HEAD counts as
// GET. So a client cannot spread one resource over many keys.
func compileKey(parts []string, missing Missing, ci ClientIP, strict bool) (appendKey, []keyErr) {
	var errs []keyErr
	var fs []appendKey
	pathOf := func(v view) string { return v.loose }
	if strict {
		pathOf = func(v view) string { return v.path }
	}
	str := func(f func(v view) string) appendKey {
		return func(dst []byte, v view, _ netip.Addr) ([]byte, bool) { return appendPart(dst, f(v)), true }
	}
	for i, p := range parts {
		kind, arg, _ := strings.Cut(p, ":")
		switch strings.ToLower(kind) {
		case "global":
			if len(parts) > 1 {
				errs = append(errs, keyErr{i, fmt.Errorf("global is one key for all: it cannot combine with %d other parts", len(parts)-1)})
			}
		case "ip":
			fs = append(fs, func(dst []byte, _ view, ip netip.Addr) ([]byte, bool) { return ci.AppendKey(dst, ip), true })
		case "route":
			fs = append(fs, func(dst []byte, v view, _ netip.Addr) ([]byte, bool) {
				return appendPart(append(appendPart(dst, v.counted()), ' '), pathOf(v)), true
			})
		case "path":
			fs = append(fs, str(pathOf))
		case "method":
			fs = append(fs, str(func(v view) string { return v.counted() }))
		case "host":
			fs = append(fs, str(func(v view) string { return v.host }))
		case "header":
			name := http.CanonicalHeaderKey(strings.TrimSpace(arg))
			if name == "" || !validHeaderName(name) {
				errs = append(errs, keyErr{i, fmt.Errorf("%q: header: needs a header name, like header:X-API-Key", p)})
				continue
			}
			if err := checkRuleHeader(name); err != nil {
				errs = append(errs, keyErr{i, err})
				continue
			}
			if name == "Host" {
				fs = append(fs, str(func(v view) string { return v.host }))
				continue
			}
			fs = append(fs, func(dst []byte, v view, ip netip.Addr) ([]byte, bool) {
				if vs := v.r.Header[name]; len(vs) > 0 && vs[0] != "" {
					return appendPart(append(dst, "h="...), vs[0]), true
				}
				switch missing {
				case MissingSkip:
					return dst, false
				case MissingShared:
					return append(dst, "missing"...), true
				}
				return ci.AppendKey(append(dst, "ip="...), ip), true
			})
		default:
			errs = append(errs, keyErr{i, fmt.Errorf("%q is not ip, header:NAME, route, path, method, host or global", p)})
		}
	}
	switch len(fs) {
	case 0:
		return func(dst []byte, _ view, _ netip.Addr) ([]byte, bool) { return dst, true }, errs
	case 1:
		return fs[0], errs
	}
	return func(dst []byte, v view, ip netip.Addr) ([]byte, bool) {
		for i, f := range fs {
			if i > 0 {
				dst = append(dst, '|')
			}
			var ok bool
			if dst, ok = f(dst, v, ip); !ok {
				return dst, false
			}
		}
		return dst, true
	}, errs
}

// clientAddressHeaders name the client's address to upstreams that believe
// them, beside X-Forwarded-For and Forwarded (canonical names).
var clientAddressHeaders = [...]string{"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip"}

// ClientAddressHeaders returns the headers other than X-Forwarded-For and
// Forwarded that name the client's address to upstreams that believe them
// (X-Real-IP and its kin), in canonical form. Rules may not read them; the
// gateway passes them on from trusted proxies only.
func ClientAddressHeaders() []string { return clientAddressHeaders[:] }

// checkRuleHeader refuses a header that rules cannot see as the upstream
// does. A hop-by-hop or framing header is consumed by the gateway (and
// net/http takes it out of the request). Any client can write the
// forwarding headers and the client address headers: key: [ip] with
// client_ip.trusted_proxies reads them from trusted proxies. The gateway
// writes X-Forwarded-Host and X-Forwarded-Proto itself, and drops a name
// with an underscore.
func checkRuleHeader(name string) error {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings", "Content-Length":
		return fmt.Errorf("%s is a hop-by-hop or framing header: the gateway consumes it, so a rule cannot see it as the upstream does", name)
	case "X-Forwarded-Host", "X-Forwarded-Proto":
		return fmt.Errorf("%s is written by the gateway for the upstream: the client's is dropped", name)
	}
	if name == "X-Forwarded-For" || name == "Forwarded" || slices.Contains(clientAddressHeaders[:], name) {
		return fmt.Errorf("%s is written by any client and dropped unless a trusted proxy sent it: use key: [ip] with client_ip.trusted_proxies, which believes it only from your proxies", name)
	}
	if strings.Contains(name, "_") {
		return fmt.Errorf("%s has an underscore: the gateway drops such headers (as nginx does), since CGI-style servers read them as the dashed name", name)
	}
	return nil
}

// appendPart appends v bounded: as written if short and free of the
// separator and of braces, else hashed. A brace could make a hash tag,
// which would let a client choose its key's Redis Cluster slot.
func appendPart(dst []byte, v string) []byte {
	if len(v) <= maxPart && strings.IndexAny(v, "|{}") < 0 && (v == "" || v[0] != '#') {
		return append(dst, v...)
	}
	sum := sha256.Sum256([]byte(v))
	dst = append(dst, '#')
	return hex.AppendEncode(dst, sum[:16])
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

type matchErr struct {
	field string
	err   error
}

// compileMatch turns the conditions into one function, cheapest checks
// first. Paths, methods and hosts are compared in the forms the view holds
// (see path.go).
func compileMatch(m MatchConfig) (func(view) bool, []matchErr) {
	var conds []func(view) bool
	var errs []matchErr
	for _, compile := range []func(MatchConfig) ([]func(view) bool, []matchErr){
		compilePath, compileMethods, compileHosts, compileHeaders,
	} {
		c, e := compile(m)
		conds, errs = append(conds, c...), append(errs, e...)
	}
	switch len(conds) {
	case 0:
		return matchAll, errs
	case 1:
		return conds[0], errs
	}
	return func(v view) bool {
		for _, c := range conds {
			if !c(v) {
				return false
			}
		}
		return true
	}, errs
}

// compilePath turns match.path or match.path_prefix into a condition.
func compilePath(m MatchConfig) (conds []func(view) bool, errs []matchErr) {
	pathOf := func(v view) string { return v.loose }
	form := loosePath
	if m.StrictPath {
		pathOf = func(v view) string { return v.path }
		form = func(p string) string { return p }
	}
	if m.Path != "" {
		if !strings.HasPrefix(m.Path, "/") {
			errs = append(errs, matchErr{"path", fmt.Errorf("%q must start with /", m.Path)})
		}
		if m.PathPrefix != "" {
			errs = append(errs, matchErr{"path_prefix", fmt.Errorf("give path or path_prefix, not both")})
		}
		path := form(cleanPath(m.Path))
		conds = append(conds, func(v view) bool { return pathOf(v) == path })
	} else if m.PathPrefix != "" {
		if !strings.HasPrefix(m.PathPrefix, "/") {
			errs = append(errs, matchErr{"path_prefix", fmt.Errorf("%q must start with /", m.PathPrefix)})
		}
		pre := strings.TrimSuffix(form(cleanPath(m.PathPrefix)), "/")
		if pre != "" {
			conds = append(conds, func(v view) bool {
				p := pathOf(v)
				return strings.HasPrefix(p, pre) && (len(p) == len(pre) || p[len(pre)] == '/')
			})
		}
	}
	return conds, errs
}

// compileMethods turns match.methods into a condition.
func compileMethods(m MatchConfig) (conds []func(view) bool, errs []matchErr) {
	if len(m.Methods) == 0 {
		return nil, nil
	}
	methods := make([]string, 0, len(m.Methods)+1)
	for i, v := range m.Methods {
		v = strings.ToUpper(strings.TrimSpace(v))
		if v == "" || !validHeaderName(v) {
			errs = append(errs, matchErr{fmt.Sprintf("methods[%d]", i), fmt.Errorf("%q is not an HTTP method", m.Methods[i])})
		}
		methods = append(methods, v)
	}
	if slices.Contains(methods, http.MethodGet) && !slices.Contains(methods, http.MethodHead) {
		methods = append(methods, http.MethodHead) // frameworks run GET's handler for HEAD
	}
	// A POST that asks to be served as another method (a method
	// override) falls under the rules of either.
	return []func(view) bool{func(v view) bool {
		return slices.Contains(methods, v.method) || v.override != "" && slices.Contains(methods, v.override)
	}}, errs
}

// compileHosts turns match.hosts into a condition.
func compileHosts(m MatchConfig) (conds []func(view) bool, errs []matchErr) {
	if len(m.Hosts) == 0 {
		return nil, nil
	}
	var exact, suffixes []string
	for i, h := range m.Hosts {
		h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		switch {
		case h == "" || strings.ContainsAny(h, "/ :"):
			errs = append(errs, matchErr{fmt.Sprintf("hosts[%d]", i), fmt.Errorf("%q is not a host name (no port, no scheme)", m.Hosts[i])})
		case strings.HasPrefix(h, "*."):
			suffixes = append(suffixes, h[1:])
		default:
			exact = append(exact, h)
		}
	}
	return []func(view) bool{func(v view) bool {
		if slices.Contains(exact, v.host) {
			return true
		}
		for _, s := range suffixes {
			if len(v.host) > len(s) && strings.HasSuffix(v.host, s) {
				return true
			}
		}
		return false
	}}, errs
}

// compileHeaders turns match.headers and match.absent_headers into
// conditions.
func compileHeaders(m MatchConfig) (conds []func(view) bool, errs []matchErr) {
	for name, want := range m.Headers {
		name, err := matchHeaderName(name)
		if err != nil {
			errs = append(errs, matchErr{"headers." + name, err})
			continue
		}
		switch {
		case name == "Host" && want == "*":
			conds = append(conds, func(v view) bool { return v.host != "" })
		case name == "Host":
			// Host is the request's host, on every path (net/http keeps it
			// out of the header map): compared as hosts are.
			host := canonicalHost(want)
			conds = append(conds, func(v view) bool { return v.host == host })
		case want == "*":
			conds = append(conds, func(v view) bool { return len(v.r.Header[name]) > 0 })
		default:
			conds = append(conds, func(v view) bool { return v.r.Header.Get(name) == want })
		}
	}
	for _, name := range m.AbsentHeaders {
		field := "absent_headers." + name
		name, err := matchHeaderName(name)
		if err != nil {
			errs = append(errs, matchErr{field, err})
			continue
		}
		if name == "Host" {
			errs = append(errs, matchErr{field, errors.New("every request has a host")})
			continue
		}
		if hasHeaderFold(m.Headers, name) {
			errs = append(errs, matchErr{field, errors.New("headers names it too: a header cannot be both present and absent")})
			continue
		}
		conds = append(conds, func(v view) bool { return v.r.Header.Get(name) == "" })
	}
	return conds, errs
}

// matchHeaderName is the canonical form of a header name a match names,
// or an error when the name is not one or rules may not read it.
func matchHeaderName(name string) (string, error) {
	if !validHeaderName(name) || name == "" {
		return name, fmt.Errorf("%q is not a header name", name)
	}
	name = http.CanonicalHeaderKey(name)
	return name, checkRuleHeader(name)
}

// hasHeaderFold reports whether m names the header canonical in any case.
func hasHeaderFold(m map[string]string, canonical string) bool {
	for k := range m {
		if http.CanonicalHeaderKey(k) == canonical {
			return true
		}
	}
	return false
}

// hostOnly strips a port from a Host header.
func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}
