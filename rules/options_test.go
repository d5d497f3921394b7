package rules

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func TestOptionErrorsNameFileLineField(t *testing.T) {
	const lim = "    limit: {algorithm: token_bucket, rate: 10, period: 1s}\n"
	cases := []struct{ yaml, want string }{
		{"rules:\n  - name: a\n" + lim + "    cost: 0\n", `f.yaml:4: rules[0].cost: cost "0" is not a whole number from 1`},
		{"rules:\n  - name: a\n" + lim + "    cost: abc\n", `f.yaml:4: rules[0].cost: cost "abc" is not`},
		{"rules:\n  - name: a\n" + lim + "    cost: 11\n", `f.yaml:4: rules[0].cost: 11 is more than the limit allows at once (10)`},
		{"rules:\n  - name: a\n" + lim + "    cost: {header: X-Cost, maxx: 3}\n", `f.yaml:4: rules[0].cost.maxx: unknown field; valid: header, response_header, response_json, reserve, max, default`},
		{"rules:\n  - name: a\n" + lim + "    cost: {header: X-Cost}\n", `f.yaml:4: rules[0].cost.max: is missing`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      header: X-Cost\n      max: 11\n", `f.yaml:6: rules[0].cost.max: 11 is more than the limit allows at once (10)`},
		{"rules:\n  - name: a\n" + lim + "    cost: {header: X-Forwarded-For, max: 3}\n", `rules[0].cost.header: X-Forwarded-For is written by any client`},
		{"rules:\n  - name: a\n" + lim + "    cost: {header: X-Cost, max: 3, default: 0}\n", `rules[0].cost.default: 0 is not in 1..max`},
		{"rules:\n  - name: a\n" + lim + "    cost: {max: 3}\n", `rules[0].cost.max: bounds a cost read from a header`},
		{"rules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 10, period: 1s}\n    cost:\n      response_header: X-Tokens\n      max: 5\n", `f.yaml:5: rules[0].cost.response_header: a cost charged after the response needs the token_bucket algorithm`},
		{"rules:\n  - name: a\n    mode: shadow\n" + lim + "    cost: {response_header: X-Tokens, max: 5}\n", `rules[0].cost.response_header: a cost charged after the response needs mode enforce, not shadow`},
		{"rules:\n  - name: a\n" + lim + "    cost: {response_json: usage.total_tokens}\n", `f.yaml:4: rules[0].cost.max: is missing`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      response_json: [usage..total_tokens]\n      max: 5\n", `f.yaml:5: rules[0].cost.response_json[0]: path "usage..total_tokens" has an empty key`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      response_json: [a, b, a]\n      max: 5\n", `f.yaml:5: rules[0].cost.response_json[2]: "a" is given twice`},
		{"rules:\n  - name: a\n" + lim + "    cost: {response_json: [a, b, c, d, e, f, g, h, i], max: 5}\n", `f.yaml:4: rules[0].cost.response_json: has 9 paths; at most 8`},
		{"rules:\n  - name: a\n" + lim + "    cost: {response_json: a, response_header: X-Tokens, max: 5}\n", `rules[0].cost.response_json: give one of header, response_header and response_json`},
		{"rules:\n  - name: a\n" + lim + "    cost: {response_json: a, max: 5, default: 6}\n", `rules[0].cost.default: 6 is not in 0..max`},
		{"rules:\n  - name: a\n" + lim + "    cost: {response_json: a, max: 11}\n", `rules[0].cost.max: 11 is more than the limit allows at once (10)`},
		{"rules:\n  - name: a\n    limit: {algorithm: sliding_log, rate: 10, period: 1s}\n    cost: {response_json: a, max: 5}\n", `f.yaml:4: rules[0].cost.response_json: a cost charged after the response needs the token_bucket algorithm`},
		{"rules:\n  - name: a\n    mode: queue\n" + lim + "    cost: {response_json: a, max: 5}\n", `rules[0].cost.response_json: a cost charged after the response needs mode enforce, not queue`},
		{"rules:\n  - name: a\n    concurrency: {max: 3}\n    cost: {response_json: a, max: 5}\n", `rules[0].cost: applies to rate limits`},
		{"rules:\n  - name: a\n" + lim + "    cost: {response_json: a, max: 5, reserve: 6}\n", `f.yaml:4: rules[0].cost.reserve: 6 is not in 1..max`},
		{"rules:\n  - name: a\n" + lim + "    cost: {header: X-Cost, max: 5, reserve: 2}\n", `rules[0].cost.reserve: is taken at admission from a cost charged after the response: give response_header or response_json`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      response_json: a\n      max: 5\n      reserve: {request_json: max_tokens}\n", `f.yaml:7: rules[0].cost.reserve.default: 0 is not in 1..max (5)`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      response_json: a\n      max: 5\n      reserve:\n        request_json: max_tokens\n        default: 6\n", `f.yaml:9: rules[0].cost.reserve.default: 6 is not in 1..max (5)`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      response_json: a\n      max: 5\n      reserve:\n        request_json: a..b\n        default: 2\n", `f.yaml:8: rules[0].cost.reserve.request_json: path "a..b" has an empty key`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      response_json: a\n      max: 5\n      reserve: {request_jsn: a, default: 2}\n", `f.yaml:7: rules[0].cost.reserve.request_jsn: unknown field; valid: request_json, default`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      response_json: a\n      max: 5\n      reserve: lots\n", `f.yaml:7: rules[0].cost.reserve: reserve "lots" is not a whole number, nor a mapping like {request_json: max_tokens, default: 1000}`},
		{"rules:\n  - name: a\n" + lim + "    cost:\n      response_json: a\n      max: 5\n      reserve: [1]\n", `f.yaml:7: rules[0].cost.reserve: expected a reserve (a whole number, or a mapping), not a sequence`},
		{"rules:\n  - name: a\n" + lim + "    cost: {header: X-Cost, max: 5, reserve: {request_json: n, default: 2}}\n", `rules[0].cost.reserve: is taken at admission from a cost charged after the response`},
		{"rules:\n  - name: a\n" + lim + "    cost: {reserve: 2}\n", `rules[0].cost.reserve: is taken at admission from a cost charged after the response`},
		{"rules:\n  - name: a\n    key: [ip, route]\n" + lim + "    overrides: {x: {rate: 1}}\n", `f.yaml:5: rules[0].overrides: overrides need a key of one part`},
		{"rules:\n  - name: a\n    key: [ip]\n" + lim + "    overrides:\n      10.0.0.0/8: {rate: 1}\n", `f.yaml:6: rules[0].overrides.10.0.0.0/8: "10.0.0.0/8": keys are addresses masked to /32`},
		{"rules:\n  - name: a\n    key: [header:X-Key]\n" + lim + "    overrides:\n      acme:\n        rate: 0\n", `f.yaml:7: rules[0].overrides.acme.rate: rate must be positive`},
		{"rules:\n  - name: a\n    key: [header:X-Key]\n" + lim + "    overrides:\n      acme: {rate: 5, stagger: true}\n", `rules[0].overrides.acme.stagger: only applies to fixed_window and sliding_window`},
		{"rules:\n  - name: a\n" + lim + "    tiers: {header: X-Plan, limits: {pro: {rate: 100}}}\n", `f.yaml:4: rules[0].tiers.header: is believed only from client_ip.trusted_proxies, and there are none`},
		{"client_ip: {trusted_proxies: [10.0.0.1]}\nrules:\n  - name: a\n" + lim + "    tiers: {limits: {pro: {rate: 100}}}\n", `rules[0].tiers.header: is missing`},
		{"client_ip: {trusted_proxies: [10.0.0.1]}\nrules:\n  - name: a\n" + lim + "    cost: 10\n    tiers:\n      header: X-Plan\n      limits: {free: {rate: 5}}\n", `rules[0].cost: 10 is more than free allows at once (5)`},
		{"rules:\n  - name: a\n" + lim + "    refused: {status: 200}\n", `f.yaml:4: rules[0].refused.status: 200 is not one of 400, 402,`},
		{"rules:\n  - name: a\n" + lim + "    refused: {status: 401}\n", `rules[0].refused.status: 401 is not one of`},
		{"rules:\n  - name: a\n" + lim + "    refused: {type: \"not a uri\"}\n", `rules[0].refused.type: "not a uri" is not an absolute URI`},
		{"rules:\n  - name: a\n" + lim + "    refused: {title: \"a\\r\\nSet-Cookie: x\"}\n", `rules[0].refused.title: must be printable text`},
		{"rules:\n  - name: a\n" + lim + "    refused: {detail: \"retry in {secs}\"}\n", `rules[0].refused.detail: may hold {rule} and {wait}, and no other braces`},
		{"rules:\n  - name: a\n" + lim + "    refused: {detail: \"line\\nbreak\"}\n", `rules[0].refused.detail: must be printable text`},
		{"rules:\n  - name: a\n" + lim + "    refused: {retry_after_jitter: -1s}\n", `rules[0].refused.retry_after_jitter: must be between 0 and 1h`},
		{"rules:\n  - name: a\n    mode: shadow\n" + lim + "    refused: {status: 503}\n", `rules[0].refused: a shadow rule never refuses`},
	}
	for _, c := range cases {
		_, err := Parse("f.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Errorf("%q: %T is not an *Error", c.yaml, err)
		}
	}
}

func TestCostRequest(t *testing.T) {
	c := Cost{Header: "X-Cost", Max: 100, Default: 1}
	for _, tc := range []struct {
		vals []string
		n    int
		err  string
	}{
		{nil, 1, ""},
		{[]string{"7"}, 7, ""},
		{[]string{" 100\t"}, 100, ""},
		{[]string{"+3"}, 3, ""},
		{[]string{"101"}, 0, "is above 100"},
		{[]string{"99999999999999999999999"}, 0, "is above 100"},
		{[]string{"0"}, 0, "is below 1"},
		{[]string{"-1"}, 0, "is below 1"},
		{[]string{"1.5"}, 0, "is not a whole number"},
		{[]string{""}, 0, "is not a whole number"},
		{[]string{"0x10"}, 0, "is not a whole number"},
		{[]string{"1", "2"}, 0, "appears more than once"},
	} {
		h := http.Header{}
		if tc.vals != nil {
			h["X-Cost"] = tc.vals
		}
		n, err := c.Request(h)
		if tc.err == "" && (err != nil || n != tc.n) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "X-Cost")) {
			t.Errorf("%q: %d, %v; want %d, %q", tc.vals, n, err, tc.n, tc.err)
		}
	}
	if n, err := (&Cost{Fixed: 5, Default: 1}).Request(http.Header{"X-Cost": {"9"}}); n != 5 || err != nil {
		t.Errorf("fixed: %d %v", n, err)
	}
	if n, err := (&Cost{Response: "X-Tokens", Max: 9, Default: 1}).Request(nil); n != 1 || err != nil {
		t.Errorf("response: %d %v", n, err)
	}
}

func TestCostFromResponse(t *testing.T) {
	c := Cost{Response: "X-Tokens", Max: 1000, Default: 2}
	for _, tc := range []struct {
		vals []string
		n    int
		ok   bool
	}{
		{nil, 2, true},
		{[]string{"0"}, 0, true},
		{[]string{"750"}, 750, true},
		{[]string{"5000"}, 1000, true},
		{[]string{"-4"}, 2, false},
		{[]string{"lots"}, 2, false},
		{[]string{"3", "4"}, 2, false},
	} {
		h := http.Header{}
		if tc.vals != nil {
			h["X-Tokens"] = tc.vals
		}
		if n, ok := c.FromResponse(h); n != tc.n || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.vals, n, ok, tc.n, tc.ok)
		}
	}
}

// overridesYAML gives one client of a per-key rule its own limit, and
// chooses tiers by X-Plan from the proxy 10.0.0.1.
const overridesYAML = `client_ip: {trusted_proxies: [10.0.0.1]}
rules:
  - name: api
    key: [header:X-API-Key]
    limit: {algorithm: token_bucket, rate: 10, period: 1s}
    overrides:
      acme: {rate: 1000}
    tiers:
      header: X-Plan
      limits:
        pro: {rate: 100, burst: 200}
        enterprise: {algorithm: sliding_window, rate: 5000, period: 1m}
`

func TestOverridesAndTiers(t *testing.T) {
	c, err := Parse("o.yaml", []byte(overridesYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Compile(c)
	req := func(peer, key string, plan ...string) Match {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer + ":4000"
		r.Header.Set("X-API-Key", key)
		if plan != nil {
			r.Header["X-Plan"] = plan
		}
		ip := s.ClientIP().Addr(r)
		ms := s.Match(nil, r, ip)
		if len(ms) != 1 {
			t.Fatalf("%d matches", len(ms))
		}
		// The rule alone (the admin's state and reset) gives the same.
		if one, ok := ms[0].Rule.MatchOf(r, ip); !ok || one != ms[0] {
			t.Errorf("MatchOf %+v, Set.Match %+v", one, ms[0])
		}
		if k, ok := ms[0].Rule.Key(r, ip); !ok || k != ms[0].Key {
			t.Errorf("Key %q, Set.Match %q", k, ms[0].Key)
		}
		return ms[0]
	}
	def := req("203.0.113.1", "bob")
	if def.Alt != 0 || def.Limit() != s.Rules[0].Limit {
		t.Fatalf("default: %+v", def)
	}
	acme := req("203.0.113.1", "acme")
	if want := (ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000, Period: time.Second}); acme.Limit() != want {
		t.Errorf("override: %+v", acme.Limit())
	}
	// The override keeps the key's parts under its own limit's prefix: a
	// change of acme's limit starts acme afresh, and no one else.
	if strings.TrimPrefix(acme.Key, acme.Rule.Alts[acme.Alt-1].prefix) != "h=acme" || acme.Key[:4] != "api:" || acme.Key == "api:"+def.Key[4:13]+"h=acme" {
		t.Errorf("override key %q (default %q)", acme.Key, def.Key)
	}
	pro := req("10.0.0.1", "bob", "pro")
	if pro.Alt == 0 || pro.Limit().Rate != 100 || pro.Limit().Burst != 200 {
		t.Errorf("tier from the trusted proxy: %+v", pro)
	}
	if strings.TrimPrefix(pro.Key, pro.Rule.Alts[pro.Alt-1].prefix) != "h=bob" {
		t.Errorf("tier key %q", pro.Key)
	}
	if ent := req("10.0.0.1", "bob", " enterprise\t"); ent.Limit().Algorithm != ratekeeper.SlidingWindow || ent.Limit().Period != time.Minute {
		t.Errorf("enterprise: %+v", ent.Limit())
	}
	// The override wins over the tier.
	if m := req("10.0.0.1", "acme", "pro"); m.Limit().Rate != 1000 {
		t.Errorf("override and tier: %+v", m.Limit())
	}
}

// TestTierNeverBelievedFromUntrusted is the tier header's one promise: a
// client that is not a trusted proxy cannot choose its tier, however it
// writes the header, and a trusted proxy's header is believed only when
// it names one tier exactly.
func TestTierNeverBelievedFromUntrusted(t *testing.T) {
	c, err := Parse("o.yaml", []byte(overridesYAML))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Compile(c)
	spoofs := []http.Header{
		{"X-Plan": {"pro"}},
		{"X-Plan": {"enterprise"}},
		{"X-Plan": {"pro", "pro"}},
		{"X-Plan": {" pro "}},
		{"x-plan": {"pro"}}, // a name net/http would have canonicalized
		{"X-PLAN": {"pro"}},
		{"X-Plan": {"pro"}, "X-Forwarded-For": {"10.0.0.1"}},
		{"X-Plan": {"pro"}, "Forwarded": {"for=10.0.0.1"}},
		{"X-Plan": {"pro"}, "X-Real-Ip": {"10.0.0.1"}},
	}
	for _, peer := range []string{"203.0.113.9:1", "[::ffff:203.0.113.9]:1", "10.0.0.2:1", "[2001:db8::1]:1", "garbage"} {
		for _, h := range spoofs {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = peer
			r.Header = h.Clone()
			r.Header.Set("X-API-Key", "mallory")
			for _, m := range s.Match(nil, r, s.ClientIP().Addr(r)) {
				if m.Alt != 0 {
					t.Errorf("peer %s, %v: believed tier %q", peer, h, m.Rule.Alts[m.Alt-1].Name)
				}
			}
		}
	}
	// From the trusted proxy: duplicates, lists, odd case and unknown names
	// fall to the default; surrounding blanks are OWS and trimmed.
	for _, tc := range []struct {
		vals []string
		tier bool
	}{
		{[]string{"pro"}, true},
		{[]string{"\tpro "}, true},
		{[]string{"pro", "pro"}, false},
		{[]string{"pro, enterprise"}, false},
		{[]string{"Pro"}, false},
		{[]string{"PRO"}, false},
		{[]string{""}, false},
		{[]string{"gold"}, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "[::ffff:10.0.0.1]:1"
		r.Header.Set("X-API-Key", "mallory")
		r.Header["X-Plan"] = tc.vals
		m := s.Match(nil, r, s.ClientIP().Addr(r))[0]
		if (m.Alt != 0) != tc.tier {
			t.Errorf("trusted %q: alt %d, want tier %v", tc.vals, m.Alt, tc.tier)
		}
	}
}

// TestOverrideChangeResetsOnlyThatClient reloads a file in which one
// client's override changed: that client's key changes (its counters start
// afresh), every other client's stays.
func TestOverrideChangeResetsOnlyThatClient(t *testing.T) {
	keys := func(yaml string) map[string]string {
		c, err := Parse("o.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := Compile(c)
		out := map[string]string{}
		for _, k := range []string{"acme", "globex", "bob", "alice"} {
			for _, plan := range []string{"", "pro"} {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = "10.0.0.1:1"
				r.Header.Set("X-API-Key", k)
				if plan != "" {
					r.Header.Set("X-Plan", plan)
				}
				out[k+"/"+plan] = s.Match(nil, r, s.ClientIP().Addr(r))[0].Key
			}
		}
		return out
	}
	before := keys(strings.Replace(overridesYAML, "      acme: {rate: 1000}\n", "      acme: {rate: 1000}\n      globex: {rate: 300}\n", 1))
	after := keys(strings.Replace(overridesYAML, "      acme: {rate: 1000}\n", "      acme: {rate: 2000}\n      globex: {rate: 300}\n", 1))
	for k, v := range before {
		if changed := after[k] != v; changed != strings.HasPrefix(k, "acme/") {
			t.Errorf("%s: %q -> %q", k, v, after[k])
		}
	}
}

func TestRefusalDetail(t *testing.T) {
	c, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: 1, period: 1s}\n    refused:\n      status: 503\n      detail: '{rule} is busy; \"retry\" in {wait}s ({rule})'\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Compile(c)
	f := s.Rules[0].Refused
	if f.Status != 503 || f.Title != "Service Unavailable" || f.Type != "about:blank" {
		t.Errorf("%+v", f)
	}
	if got := string(f.AppendDetail(nil, "a", 7)); got != `a is busy; "retry" in 7s (a)` {
		t.Errorf("detail %q", got)
	}
	if d := defaultRefusal(); string(d.AppendDetail(nil, "per-ip", 2)) != `rate limit "per-ip" exceeded: retry in 2 s` {
		t.Errorf("default detail %q", d.AppendDetail(nil, "per-ip", 2))
	}
}

// FuzzCostRequest: a cost header's value is accepted only as one whole
// number in 1..Max, which is what it reads as in decimal.
func FuzzCostRequest(f *testing.F) {
	for _, s := range []string{"1", " 42\t", "+7", "-1", "0", "100", "101", "1e3", "٣", "99999999999999999999999", ""} {
		f.Add(s)
	}
	c := Cost{Header: "X-Cost", Max: 100, Default: 1}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := c.Request(http.Header{"X-Cost": {s}})
		want, aerr := strconv.Atoi(strings.TrimPrefix(strings.Trim(s, " \t"), "+"))
		good := aerr == nil && want >= 1 && want <= 100 && !strings.HasPrefix(strings.Trim(s, " \t"), "+-") && !strings.HasPrefix(strings.Trim(s, " \t"), "++")
		if good != (err == nil) || good && n != want {
			t.Fatalf("%q: %d, %v; strconv says %d, %v", s, n, err, want, aerr)
		}
	})
}

// TestCostFromBody: a body's reading becomes a cost within 0..Max, never
// below Default when the body was cut short or lied.
func TestCostFromBody(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte("rules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: 1000, period: 1m}\n    cost: {response_json: [usage.total_tokens], max: 500, default: 20}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &set.Rules[0].Cost
	json := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		h        http.Header
		body     string
		complete bool
		n        int
		ok       bool
	}{
		{json, `{"usage":{"total_tokens":42}}`, true, 42, true},
		{json, `{"usage":{"total_tokens":0}}`, true, 0, true},
		{json, `{"usage":{"total_tokens":9000}}`, true, 500, true},
		{json, `{"usage":{"total_tokens":1e400}}`, true, 500, true},
		{json, `{"other":1}`, true, 20, true},
		{json, `{"usage":{"total_tokens":-3}}`, true, 20, false},
		{json, `{"usage":{"total_tokens":"300"}}`, true, 20, false},
		{json, `{"usage":{"total_tokens":3}`, true, 20, false},
		{json, `{"usage":{"total_tokens":3},`, false, 20, true},
		{json, `{"usage":{"total_tokens":300},`, false, 300, true},
		{http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}, "data: {\"usage\":{\"total_tokens\":7}}\n\ndata: [DONE]\n\n", true, 7, true},
		{http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, `{"usage":{"total_tokens":42}}`, true, 20, false},
	} {
		b := c.Meter(tc.h)
		b.Write([]byte(tc.body))
		if n, ok := c.FromBody(b, tc.complete); n != tc.n || ok != tc.ok {
			t.Errorf("%q complete %v: %d %v, want %d %v", tc.body, tc.complete, n, ok, tc.n, tc.ok)
		}
	}
	// Cut short, a request pays its reserve when that is more.
	c.Reserve = 300
	for body, want := range map[string]int{`{"usage":{"total_tokens":30},`: 300, `{"usage":{"total_tokens":400},`: 400} {
		b := c.Meter(json)
		b.Write([]byte(body))
		if n, _ := c.FromBody(b, false); n != want {
			t.Errorf("reserve 300, %q cut short: %d, want %d", body, n, want)
		}
		if n, _ := c.FromBody(c.Meter(json), true); n != 20 {
			t.Errorf("reserve 300, no body: %d, want the default", n)
		}
	}
}

// TestReserveFromRequestDescribed: a reserve read from the request is
// parsed, compiled and described, and a fixed one still reads as before.
func TestReserveFromRequestDescribed(t *testing.T) {
	for _, c := range []struct{ reserve, want string }{
		{"{request_json: max_tokens, default: 900}", "a request needs its body's max_tokens (1..4000; 900 without it), then costs"},
		{"300", "a request needs 300 units, then costs"},
	} {
		cfg, err := Parse("f.yaml", []byte("rules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: 10000, period: 1m}\n    cost: {response_json: usage.total_tokens, max: 4000, reserve: "+c.reserve+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Compile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if d := s.Rules[0].Describe(); !strings.Contains(d, c.want) {
			t.Errorf("reserve %s: %q, want it to hold %q", c.reserve, d, c.want)
		}
	}
}
