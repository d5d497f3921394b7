package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/gateway/internal/fastpath"
	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
	"github.com/ratekeeper/ratekeeper/gateway/internal/problem"
	"github.com/ratekeeper/ratekeeper/internal/algo"
	"github.com/ratekeeper/ratekeeper/internal/server/adminauth"
	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
	"github.com/ratekeeper/ratekeeper/rules"
)

// The admin listener's inspect and reset endpoints (docs/gateway.md):
//
//   - GET /v1/rules: the rules loaded and their file, secrets redacted.
//   - GET /v1/rules/{rule}/state?ip=&method=&path=&host=&header=Name:value:
//     the state of the counter that rule keeps for the request described.
//     It takes nothing.
//   - POST /v1/rules/{rule}/reset?...: forget that counter (admin.reset and
//     the bearer token only);
//   - GET /v1/top, GET /v1/status and the page at /ui/: who is limited
//     (top.go).
//
// The request is described rather than its key given, so that the rule's
// own key function builds the key, exactly as for a real request.

// Bounds on what describes a request, so that an admin query cannot make
// the gateway build anything large.
const (
	maxAdminQuery   = 8 << 10 // bytes of the raw query
	maxAdminValue   = 4 << 10 // bytes of one value
	maxAdminHeaders = 32
)

// adminHandler serves the endpoints on the admin listener.
func (g *Gateway) adminHandler() http.Handler {
	guard := adminauth.New(g.logger, g.metrics.AdminUnauthorized)
	read := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			cfg := g.cfg.Load()
			if cfg.Admin.ProtectReads && !guard.Authorize(w, r, cfg.adminToken) {
				return
			}
			h(w, r)
		}
	}
	mux := http.NewServeMux()
	// With a token, /v1/top asks for it: it names clients. The other
	// reads do with protect_reads.
	dash := g.dashboard(func(w http.ResponseWriter, r *http.Request) bool {
		cfg := g.cfg.Load()
		protect := cfg.Admin.ProtectReads || cfg.adminToken != "" && r.URL.Path == dashboard.TopPath
		return !protect || guard.Authorize(w, r, cfg.adminToken)
	})
	for _, p := range []string{"GET /ui", "GET /ui/", "GET " + dashboard.StatusPath, "GET " + dashboard.TopPath} {
		mux.Handle(p, dash)
	}
	mux.HandleFunc("GET /v1/rules", read(g.adminRules))
	mux.HandleFunc("GET /v1/rules/{rule}/state", read(g.adminState))
	mux.HandleFunc("POST /v1/rules/{rule}/reset", func(w http.ResponseWriter, r *http.Request) {
		cfg := g.cfg.Load()
		if !cfg.Admin.Reset {
			problem.Write(w, http.StatusNotFound, "Not Found", "reset is off: set admin.reset: true and admin.token_file (or admin.token_env) in the gateway's file")
			return
		}
		if !guard.Authorize(w, r, cfg.adminToken) {
			return
		}
		g.adminReset(w, r)
	})
	return mux
}

// AdminRule is one rule as GET /v1/rules lists it.
type AdminRule struct {
	Name         string     `json:"name"`
	Match        AdminMatch `json:"match"`
	Key          []string   `json:"key"`
	OnMissingKey string     `json:"on_missing_key,omitempty"`
	// Limit is a rate rule's limit; Concurrency a concurrency rule's.
	Limit       *AdminLimit       `json:"limit,omitempty"`
	Concurrency *AdminConcurrency `json:"concurrency,omitempty"`
	Mode        string            `json:"mode"`
	MaxDelay    float64           `json:"max_delay_seconds,omitempty"`
	Ban         float64           `json:"ban_seconds,omitempty"`
	StoreMode   string            `json:"store_mode,omitempty"`
	KeyPrefix   string            `json:"key_prefix"`
	// OverLimit is a rule's over_limit when it forwards or reroutes.
	OverLimit *AdminOverLimit `json:"over_limit,omitempty"`
}

// AdminOverLimit is what a rule does past its limit: its action, header
// and upstream (a password in it redacted).
type AdminOverLimit struct {
	Action   string `json:"action"`
	Header   string `json:"header,omitempty"`
	Upstream string `json:"upstream,omitempty"`
}

// AdminMatch is a rule's match with its header values redacted (a value
// may be a shared secret): "*" stays, any other value reads "<redacted>".
type AdminMatch struct {
	Methods    []string          `json:"methods,omitempty"`
	Path       string            `json:"path,omitempty"`
	PathPrefix string            `json:"path_prefix,omitempty"`
	StrictPath bool              `json:"strict_path,omitempty"`
	Hosts      []string          `json:"hosts,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	// AbsentHeaders are named in clear: they carry no value to hide.
	AbsentHeaders []string `json:"absent_headers,omitempty"`
}

// AdminLimit is a rule's limit.
type AdminLimit struct {
	Algorithm   string  `json:"algorithm"`
	Rate        int     `json:"rate"`
	Period      float64 `json:"period_seconds"`
	Burst       int     `json:"burst,omitempty"`
	Stagger     bool    `json:"stagger,omitempty"`
	LogRejected bool    `json:"log_rejected,omitempty"`
	// Calendar, TimeZone, ZoneData and Offset are a calendar window's;
	// Period is then 0. ZoneData is rules.ZoneData of the zone.
	Calendar string  `json:"calendar,omitempty"`
	TimeZone string  `json:"time_zone,omitempty"`
	ZoneData string  `json:"zone_data,omitempty"`
	Offset   float64 `json:"offset_seconds,omitempty"`
}

// adminLimit is l as GET /v1/rules shows it.
func adminLimit(l ratekeeper.Limit) *AdminLimit {
	a := &AdminLimit{Algorithm: string(l.Algorithm), Rate: l.Rate, Period: seconds(l.Period),
		Burst: l.Burst, Stagger: l.Stagger, LogRejected: l.LogRejected, Calendar: string(l.Calendar), Offset: seconds(l.Offset)}
	if l.Calendar != "" {
		a.TimeZone = "UTC"
		if l.Location != nil {
			a.TimeZone = l.Location.String()
		}
		a.ZoneData = rules.ZoneData(l.Location)
	}
	return a
}

// AdminConcurrency is a concurrency rule's limit: requests in flight.
type AdminConcurrency struct {
	Max int     `json:"max"`
	TTL float64 `json:"ttl_seconds"`
}

// AdminRules is the answer of GET /v1/rules.
type AdminRules struct {
	File string `json:"file"`
	// Store is the store's URL with its password redacted, and its mode.
	Store          string      `json:"store"`
	StoreMode      string      `json:"store_mode,omitempty"`
	ResetEnabled   bool        `json:"reset_enabled"`
	ReadsProtected bool        `json:"reads_protected"`
	Rules          []AdminRule `json:"rules"`
}

// AdminState is the answer of GET /v1/rules/{rule}/state and, with Reset
// set, of POST .../reset, whose figures are the state after the reset.
// Durations are in seconds, rounded up to the millisecond.
type AdminState struct {
	Rule string `json:"rule"`
	// Key is the counter's key, as the rule built it.
	Key string `json:"key"`
	// Matches says whether the rule's match covers the request described
	// and its ip is on neither access list (the counter is the one it
	// would use if it did).
	Matches bool `json:"matches"`
	// Override is true when the key's override gives the limit; Tier names
	// the tier that does. Neither: the rule's own.
	Override bool   `json:"override,omitempty"`
	Tier     string `json:"tier,omitempty"`
	Reset    bool   `json:"reset,omitempty"`
	// The state, for a request of cost 1, taking nothing: whether it would
	// pass now, and if not, after how long.
	Allowed    *bool   `json:"allowed,omitempty"`
	Limit      int     `json:"limit,omitempty"`
	Remaining  int     `json:"remaining"`
	RetryAfter float64 `json:"retry_after_seconds"`
	ResetAfter float64 `json:"reset_after_seconds"`
	// Fallback is "uncounted" or "local" when the store did not answer and
	// its failure policy did (see ratekeeper.Fallback).
	Fallback string `json:"fallback,omitempty"`
	// BannedUntil is when the key's ban ends (RFC 3339, UTC, by this
	// gateway's clock), and BannedFor the seconds it has left; both absent
	// when the key is not banned. A banned key is not Allowed, and its
	// RetryAfter is at least the ban's.
	BannedUntil string  `json:"banned_until,omitempty"`
	BannedFor   float64 `json:"banned_for_seconds,omitempty"`
	// PeriodStart and PeriodEnd bound the calendar period that holds the
	// state (RFC 3339, in the limit's time zone); absent for a limit that
	// does not follow the calendar.
	PeriodStart string `json:"period_start,omitempty"`
	PeriodEnd   string `json:"period_end,omitempty"`
}

func (g *Gateway) adminRules(w http.ResponseWriter, _ *http.Request) {
	cfg := g.cfg.Load()
	set := g.mw.Rules()
	out := AdminRules{File: g.path, Store: cfg.Store.Redacted(), StoreMode: cfg.Store.Mode,
		ResetEnabled: cfg.Admin.Reset, ReadsProtected: cfg.Admin.ProtectReads, Rules: []AdminRule{}}
	for _, rl := range set.Rules {
		c := rl.Config
		m := AdminMatch{Methods: c.Match.Methods, Path: c.Match.Path, PathPrefix: c.Match.PathPrefix,
			StrictPath: c.Match.StrictPath, Hosts: c.Match.Hosts, AbsentHeaders: c.Match.AbsentHeaders}
		if len(c.Match.Headers) > 0 {
			m.Headers = map[string]string{}
			for k, v := range c.Match.Headers {
				if v != "*" {
					v = "<redacted>"
				}
				m.Headers[k] = v
			}
		}
		key := c.Key
		if key == nil {
			key = []string{"global"}
		}
		ar := AdminRule{
			Name: rl.Name, Match: m, Key: key, OnMissingKey: c.OnMissingKey,
			Mode: rl.Mode.String(), MaxDelay: seconds(rl.MaxDelay), Ban: seconds(rl.Ban), StoreMode: rl.StoreMode, KeyPrefix: rl.KeyPrefix(),
		}
		if o := rl.OverLimit; o.Action != rules.Refuse {
			ar.OverLimit = &AdminOverLimit{Action: o.Action.String(), Header: o.Header, Upstream: redactedURL(o.Upstream)}
		}
		if rl.IsConcurrency() {
			ttl := rl.Concurrency.TTL
			if ttl == 0 {
				ttl = ratekeeper.DefaultLeaseTTL
			}
			ar.Concurrency = &AdminConcurrency{Max: rl.Concurrency.Max, TTL: seconds(ttl)}
		} else {
			ar.Limit = adminLimit(rl.Limit)
		}
		out.Rules = append(out.Rules, ar)
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) adminState(w http.ResponseWriter, r *http.Request) {
	m, matches, ok := g.adminKey(w, r)
	if !ok {
		return
	}
	st, err := g.peek(r.Context(), m, matches)
	if err != nil {
		problem.Write(w, http.StatusServiceUnavailable, "Service Unavailable", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (g *Gateway) adminReset(w http.ResponseWriter, r *http.Request) {
	m, matches, ok := g.adminKey(w, r)
	if !ok {
		return
	}
	err := g.resetKey(r.Context(), m)
	switch {
	case errors.Is(err, ratekeeper.ErrNoReset):
		problem.Write(w, http.StatusNotImplemented, "Not Implemented", err.Error())
		return
	case err != nil:
		problem.Write(w, http.StatusServiceUnavailable, "Service Unavailable", "the store did not reset: "+err.Error())
		return
	}
	g.logger.Info("admin reset a client's counter", "rule", m.Rule.Name, "remote", r.RemoteAddr)
	st, err := g.peek(r.Context(), m, matches)
	if err != nil {
		problem.Write(w, http.StatusServiceUnavailable, "Service Unavailable", "the counter was reset, but "+err.Error())
		return
	}
	st.Reset = true
	writeJSON(w, http.StatusOK, st)
}

// peek is the state of m's counter, taking nothing.
func (g *Gateway) peek(ctx context.Context, m rules.Match, matches bool) (AdminState, error) {
	lim, err := ratekeeper.New(g.proc.Store(), m.Limit())
	if err != nil {
		return AdminState{}, fmt.Errorf("the limit: %w", err)
	}
	d, err := lim.Peek(ctx, m.Key)
	if err != nil {
		return AdminState{}, fmt.Errorf("the store did not answer: %w", err)
	}
	allowed := d.Allowed
	st := AdminState{Rule: m.Rule.Name, Key: m.Key, Matches: matches, Allowed: &allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: seconds(d.RetryAfter), ResetAfter: seconds(d.ResetAfter)}
	if m.Alt > 0 {
		if a := m.Rule.Alts[m.Alt-1]; a.Tier {
			st.Tier = a.Name
		} else {
			st.Override = true
		}
	}
	if d.Fallback != ratekeeper.NoFallback {
		st.Fallback = d.Fallback.String()
	}
	if start, end, ok := algo.CalendarPeriod(m.Limit(), cmp.Or(d.At, time.Now())); ok {
		st.PeriodStart, st.PeriodEnd = start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano)
	}
	if m.Rule.Ban > 0 {
		if err := peekBan(ctx, g.proc.Store(), m, &st); err != nil {
			return AdminState{}, err
		}
	}
	return st, nil
}

// resetKey forgets m's counter and lifts its ban.
func (g *Gateway) resetKey(ctx context.Context, m rules.Match) error {
	if err := resetOne(ctx, g.proc.Store(), m.Key, m.Limit()); err != nil {
		return err
	}
	if m.Rule.Ban > 0 {
		return resetOne(ctx, g.proc.Store(), rules.BanKey(m.Key), m.Rule.BanLimit())
	}
	return nil
}

// resetOne forgets key's state for l on store.
func resetOne(ctx context.Context, store ratekeeper.Store, key string, l ratekeeper.Limit) error {
	lim, err := ratekeeper.New(store, l)
	if err != nil {
		return err
	}
	return lim.Reset(ctx, key)
}

// peekBan adds to st the ban of m's key, if it has one.
func peekBan(ctx context.Context, store ratekeeper.Store, m rules.Match, st *AdminState) error {
	lim, err := ratekeeper.New(store, m.Rule.BanLimit())
	if err != nil {
		return fmt.Errorf("the ban's limit: %w", err)
	}
	d, err := lim.Peek(ctx, rules.BanKey(m.Key))
	if err != nil {
		return fmt.Errorf("the store did not answer about the ban: %w", err)
	}
	if d.RetryAfter <= 0 || d.Fallback != ratekeeper.NoFallback {
		return nil
	}
	no := false
	st.Allowed, st.Remaining = &no, 0
	st.RetryAfter = max(st.RetryAfter, seconds(d.RetryAfter))
	st.ResetAfter = max(st.ResetAfter, st.RetryAfter)
	st.BannedFor = seconds(d.RetryAfter)
	st.BannedUntil = time.Now().Add(d.RetryAfter).UTC().Format(time.RFC3339Nano)
	return nil
}

// seconds is d in seconds rounded up to the millisecond, as the admin's
// JSON writes every duration: a wait is never shown shorter than it is.
func seconds(d time.Duration) float64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return float64(ms) / 1e3
}

// adminKey finds the rule the path names, or answers the error. It
// returns the Match the rule gives the request the query describes, as
// for that request coming through the gateway. The Match holds its key,
// and the override or tier whose limit applies.
func (g *Gateway) adminKey(w http.ResponseWriter, r *http.Request) (m rules.Match, matches, ok bool) {
	name := r.PathValue("rule")
	set := g.mw.Rules()
	var rl *rules.Rule
	for _, x := range set.Rules {
		if x.Name == name {
			rl = x
			break
		}
	}
	if rl == nil {
		problem.Write(w, http.StatusNotFound, "Not Found", fmt.Sprintf("no rule is named %q (GET /v1/rules lists them)", rules.BoundKey(name)))
		return m, false, false
	}
	if rl.IsConcurrency() {
		// Its slots are leases that end with their requests: there is no
		// counter to show or forget.
		problem.Write(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("rule %s limits requests in flight: it keeps no counter to show or reset", rl.Name))
		return m, false, false
	}
	req, ip, err := describedRequest(r.URL.RawQuery, g.settings.allowEncodedSlash)
	if err == nil {
		err = checkRepeated(req.Header, g.ruleHeaders())
	}
	if err != nil {
		problem.Write(w, http.StatusBadRequest, "Bad Request", err.Error())
		return m, false, false
	}
	if p := missingParam(rl.Config, r.URL.Query(), req.Header); p != "" {
		problem.Write(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("rule %s keys this request by its %s: give %s=", rl.Name, p, p))
		return m, false, false
	}
	viaTrustedProxy(req, set.ClientIP())
	m, ok = rl.MatchOf(req, ip)
	if !ok {
		problem.Write(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("rule %s does not apply to this request: a header its key needs is missing (on_missing_key: skip)", rl.Name))
		return m, false, false
	}
	return m, rl.Matches(req) && !listed(set, ip), true
}

// listed reports whether ip is on access.allow or access.deny, whose
// requests no rule counts.
func listed(set *rules.Set, ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	denied, exempt := set.Access(ip)
	return denied || exempt
}

// checkRepeated refuses a header the rules read given more than once, as
// the gateway refuses a request that carries one twice (view).
func checkRepeated(h http.Header, read []string) error {
	for _, name := range read {
		if n := len(h[name]); n > 1 {
			return fmt.Errorf("header %s is given %d times: the gateway refuses a request with a header its rules read more than once", name, n)
		}
	}
	return nil
}

// viaTrustedProxy makes r's TCP peer a trusted proxy, when there is one:
// the headers the query gives are those the rules believe, a tier's
// included, which the gateway believes only from a trusted proxy. The
// client's address is the query's ip, which the key reads apart.
func viaTrustedProxy(r *http.Request, ci rules.ClientIP) {
	if len(ci.Trusted) > 0 {
		r.RemoteAddr = netip.AddrPortFrom(ci.Trusted[0].Addr(), 1).String()
	}
}

// missingParam names the first parameter a rule's key reads that the query
// q does not give ("" when none is missing). An "ip" part needs ip. So
// does a header part whose header is missing, when on_missing_key stands
// the address in for it. The host, method and path parts need host,
// method and path. Defaults would key another request than the one meant.
func missingParam(c rules.RuleConfig, q url.Values, h http.Header) string {
	var need []string
	for _, p := range c.Key {
		kind, arg, _ := strings.Cut(p, ":")
		switch strings.ToLower(kind) {
		case "ip":
			need = append(need, "ip")
		case "host":
			need = append(need, "host")
		case "method":
			need = append(need, "method")
		case "path":
			need = append(need, "path")
		case "route":
			need = append(need, "method", "path")
		case "header":
			switch name := strings.TrimSpace(arg); {
			case strings.EqualFold(name, "Host"):
				need = append(need, "host")
			case h.Get(name) == "" && (c.OnMissingKey == "" || c.OnMissingKey == "ip"):
				need = append(need, "ip")
			}
		}
	}
	for _, p := range need {
		if !q.Has(p) {
			return p
		}
	}
	return ""
}

// describedRequest builds the request that query describes: ip (the
// client's address), method (default GET), path (default /, normalized as
// the gateway normalizes a request's), host, and header=Name:value, which
// may repeat. Anything else, a value repeated that may not be, one too
// long, a bad address or method, or a header value with a control
// character (CR, LF) is an error that says which.
func describedRequest(query string, allowEncodedSlash bool) (*http.Request, netip.Addr, error) {
	var ip netip.Addr
	if len(query) > maxAdminQuery {
		return nil, ip, fmt.Errorf("the query has %d bytes: at most %d", len(query), maxAdminQuery)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, ip, fmt.Errorf("the query is malformed: %v", err)
	}
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	for name, vs := range q {
		for _, v := range vs {
			if len(v) > maxAdminValue {
				return nil, ip, fmt.Errorf("%s: the value has %d bytes: at most %d", name, len(v), maxAdminValue)
			}
		}
		if name != "header" && len(vs) > 1 {
			return nil, ip, fmt.Errorf("%s is given %d times: once at most", name, len(vs))
		}
		v := vs[0]
		switch name {
		case "ip":
			a, err := netip.ParseAddr(v)
			if err != nil {
				return nil, ip, fmt.Errorf("ip: %q is not an IP address", rules.BoundKey(v))
			}
			ip = a.Unmap().WithZone("") // as the request path reads a peer
			r.RemoteAddr = netip.AddrPortFrom(ip, 1).String()
		case "method":
			if !h1.IsToken(v) {
				return nil, ip, fmt.Errorf("method: %q is not an HTTP method", rules.BoundKey(v))
			}
			r.Method = v
		case "host":
			if !h1.ValidHost(v) {
				return nil, ip, fmt.Errorf("host: %q is not a host name or address with an optional port", rules.BoundKey(v))
			}
			r.Host = v
		case "path":
			if !strings.HasPrefix(v, "/") {
				return nil, ip, fmt.Errorf("path: %q does not start with /", rules.BoundKey(v))
			}
			u, err := url.ParseRequestURI(v)
			if err != nil || u.RawQuery != "" || u.Fragment != "" {
				return nil, ip, fmt.Errorf("path: %q is not a path (without a query)", rules.BoundKey(v))
			}
			p, raw, err := fastpath.NormalizeTarget(u.EscapedPath(), allowEncodedSlash)
			if err != nil {
				return nil, ip, fmt.Errorf("path: the gateway would refuse it: %v", err)
			}
			r.URL.Path, r.URL.RawPath = p, raw
		case "header":
			if len(vs) > maxAdminHeaders {
				return nil, ip, fmt.Errorf("header is given %d times: at most %d", len(vs), maxAdminHeaders)
			}
			for _, hv := range vs {
				hn, val, ok := strings.Cut(hv, ":")
				hn = strings.TrimSpace(hn)
				val = strings.TrimLeft(val, " \t")
				switch {
				case !ok:
					return nil, ip, fmt.Errorf("header: %q is not Name:value", rules.BoundKey(hv))
				case !h1.IsToken(hn):
					return nil, ip, fmt.Errorf("header: %q is not a header name", rules.BoundKey(hn))
				case strings.ContainsFunc(val, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }):
					return nil, ip, fmt.Errorf("header %s: the value holds a control character (CR, LF, NUL...)", hn)
				case strings.TrimRight(val, " \t") != val:
					return nil, ip, fmt.Errorf("header %s: the value ends with white space, which the gateway refuses in a header rules read", hn)
				}
				r.Header.Add(hn, val)
			}
		default:
			return nil, ip, fmt.Errorf("%q is not a parameter: use ip, method, path, host and header=Name:value", rules.BoundKey(name))
		}
	}
	r.URL.Host = r.Host
	return r, ip, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "Internal Server Error", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
