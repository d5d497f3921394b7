package rules

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func TestIssueExample(t *testing.T) {
	c, err := LoadFile("testdata/issue.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rules) != 4 {
		t.Fatalf("%d rules", len(s.Rules))
	}
	if got := s.Rules[2].Limit.Period; got != 7*24*time.Hour {
		t.Errorf("1w = %v", got)
	}
	if s.Rules[3].Mode != Shadow {
		t.Errorf("mode %v", s.Rules[3].Mode)
	}
	want := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 2, Period: time.Second, Burst: 2}
	if s.Rules[0].Limit != want {
		t.Errorf("limit %+v", s.Rules[0].Limit)
	}

	post := func(path, user string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, path, nil)
		r.RemoteAddr = "203.0.113.7:5555"
		if user != "" {
			r.Header.Set("X-User-ID", user)
		}
		return r
	}
	r := post("/v1/posts", "alice")
	ms := s.Match(nil, r, s.ClientIP().Addr(r))
	if len(ms) != 2 || ms[0].Rule.Name != "posts-per-user" || ms[1].Rule.Name != "everyone" {
		t.Fatalf("matches %+v", ms)
	}
	if !strings.HasPrefix(ms[0].Key, "posts-per-user:") || !strings.HasSuffix(ms[0].Key, ":h=alice") {
		t.Errorf("key %q", ms[0].Key)
	}
	// A missing header falls back to the client IP, by default.
	r = post("/v1/posts", "")
	ms = s.Match(nil, r, s.ClientIP().Addr(r))
	if !strings.HasSuffix(ms[0].Key, ":ip=203.0.113.7") {
		t.Errorf("missing header key %q", ms[0].Key)
	}
	// A path prefix matches at a segment boundary only.
	for path, want := range map[string]int{"/v1/rewards": 2, "/v1/rewards/9": 2, "/v1/rewardsX": 1} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if got := len(s.Match(nil, r, netip.MustParseAddr("192.0.2.1"))); got != want {
			t.Errorf("%s: %d matches, want %d", path, got, want)
		}
	}
	if d, e := s.Access(netip.MustParseAddr("198.51.100.9")); !d || e {
		t.Error("deny list")
	}
	if d, e := s.Access(netip.MustParseAddr("192.0.2.9")); d || !e {
		t.Error("allow list")
	}
	for _, rl := range s.Rules {
		if rl.Describe() == "" {
			t.Error("no description")
		}
	}
}

// TestErrorsNameFileLineField checks that every kind of problem names the
// file, the line and the field.
func TestErrorsNameFileLineField(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"rules:\n  - name: a\n    limt: {}\n", `f.yaml:3: rules[0].limt: unknown field; valid: name, match,`},
		{"rules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: 1, period: 1x}\n", `f.yaml:3: rules[0].limit.period: "1x" is not a duration`},
		{"rules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: abc, period: 1s}\n", "f.yaml:3: rules[0].limit.rate: expected a whole number, not text"},
		{"rules:\n  - name: a\n    limit:\n      algorithm: token_bucket\n      rate: 0\n      period: 1s\n", "f.yaml:5: rules[0].limit.rate: rate must be positive"},
		{"rules:\n  - name: a\n    limit:\n      algorithm: tokenbucket\n      rate: 1\n      period: 1s\n", `f.yaml:4: rules[0].limit.algorithm: unknown algorithm "tokenbucket"`},
		{"access:\n  deny:\n    - 10.0.0.0/33\n", "f.yaml:3: access.deny[0]: \"10.0.0.0/33\" is not a CIDR"},
		{"client_ip: {trusted_proxies: [nope]}\n", "f.yaml:1: client_ip.trusted_proxies[0]:"},
		{"rules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: 1, period: 1s}\n  - name: a\n    limit: {algorithm: token_bucket, rate: 1, period: 1s}\n", `f.yaml:4: rules[1].name: "a" is already the name of rules[0]`},
		{"rules:\n  - name: q\n    mode: queue\n    limit: {algorithm: token_bucket, rate: 1, period: 1s}\n", "f.yaml:3: rules[0].mode: queue mode needs the leaky_bucket"},
		{"rules:\n  - name: k\n    key: [cookie:x]\n    limit: {algorithm: token_bucket, rate: 1, period: 1s}\n", `f.yaml:3: rules[0].key[0]: "cookie:x" is not`},
		{"rules: [\n", "f.yaml:"},
		{"listen: 127.0.0.1:8080\n", "f.yaml:1: listen: unknown field; valid: client_ip,"}, // the gateway's, not a rules file's
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

func TestEmptyFile(t *testing.T) {
	c, err := Parse("e.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(c); err != nil {
		t.Fatal(err)
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"1s": time.Second, "90m": 90 * time.Minute, "1d": 24 * time.Hour, "2w": 14 * 24 * time.Hour, "1h30m": 90 * time.Minute} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	// 213504d would wrap around to 25m26.290448384s.
	for _, in := range []string{"", "1", "1x", "d", "1.5d", "106752d", "213504d", "999999d", "15251w"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
	if s := Duration(7 * 24 * time.Hour).String(); s != "1w" {
		t.Errorf("1w renders %q", s)
	}
}

func TestClientIP(t *testing.T) {
	ci := ClientIP{
		Trusted:    []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")},
		Header:     "X-Forwarded-For",
		IPv4Prefix: 32, IPv6Prefix: 64,
	}
	cases := []struct {
		peer, xff, want string
	}{
		{"203.0.113.5:1", "1.2.3.4", "203.0.113.5"},                  // untrusted peer: header ignored
		{"10.0.0.1:1", "1.2.3.4", "1.2.3.4"},                         // trusted peer
		{"10.0.0.1:1", "6.6.6.6, 1.2.3.4, 10.0.0.2", "1.2.3.4"},      // walk past trusted hops from the right
		{"10.0.0.1:1", "10.0.0.3, 10.0.0.2", "10.0.0.3"},             // all trusted: the leftmost
		{"10.0.0.1:1", "1.2.3.4, garbage", "10.0.0.1"},               // bad hop: stop at the last good address
		{"10.0.0.1:1", "", "10.0.0.1"},                               // no header
		{"[2001:db8:ffff::1]:1", "[2001:db8::7]:443", "2001:db8::7"}, // IPv6 hops
		{"[::ffff:10.0.0.1]:1", "1.2.3.4:80", "1.2.3.4"},             // mapped peer, hop with port
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := ci.Addr(r).String(); got != c.want {
			t.Errorf("peer %s xff %q: %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
	ci.Header = "Forwarded"
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	r.Header.Add("Forwarded", `for=6.6.6.6, for="[2001:db8::9]:80";proto=https`)
	r.Header.Add("Forwarded", `for=10.0.0.9;by=x`)
	if got := ci.Addr(r).String(); got != "2001:db8::9" {
		t.Errorf("Forwarded: %s", got)
	}
	if got := ci.Key(netip.MustParseAddr("2001:db8:1:2:3:4:5:6")); got != "2001:db8:1:2::/64" {
		t.Errorf("IPv6 key %s", got)
	}
	if got := ci.Key(netip.MustParseAddr("192.0.2.44")); got != "192.0.2.44" {
		t.Errorf("IPv4 key %s", got)
	}
}

func TestKeysBoundedAndDistinct(t *testing.T) {
	c, err := Parse("k.yaml", []byte(`rules:
  - name: combo
    key: [header:X-A, header:X-B]
    limit: {algorithm: fixed_window, rate: 1, period: 1s}
  - name: combo2
    key: [header:X-A, header:X-B]
    limit: {algorithm: fixed_window, rate: 2, period: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Compile(c)
	key := func(a, b string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-A", a)
		r.Header.Set("X-B", b)
		k, _ := s.Rules[0].Key(r, netip.MustParseAddr("192.0.2.1"))
		return k
	}
	if key("a|b", "c") == key("a", "b|c") {
		t.Error("separator collision")
	}
	long := strings.Repeat("x", 10000)
	if k := key(long, long); len(k) > 200 {
		t.Errorf("key of %d bytes", len(k))
	}
	if s.Rules[0].KeyPrefix() == s.Rules[1].KeyPrefix() {
		t.Error("two rules share a prefix")
	}
	// The same rule and limit keep their prefix across compiles.
	s2, _ := Compile(c)
	if s2.Rules[0].KeyPrefix() != s.Rules[0].KeyPrefix() {
		t.Error("prefix not stable")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("rules:\n  - name: a\n    limit: {algorithm: token_bucket, rate: 1, period: 1d}\n"))
	f.Add([]byte("client_ip: {trusted_proxies: [10.0.0.0/8, '::1'], ipv6_prefix: 48}\naccess: {deny: [1.2.3.4]}\n"))
	f.Add([]byte("rules: [{name: q, mode: queue, max_delay: 2s, match: {hosts: ['*.x.com'], headers: {X-A: '*'}}, limit: {algorithm: leaky_bucket, rate: 5, period: 1s, burst: 3}}]\n"))
	f.Add([]byte("rules: [{name: login, key: [ip], ban: 1h, limit: {algorithm: sliding_log, rate: 5, period: 15m}}]\n"))
	f.Add([]byte("{{{"))
	f.Add([]byte("rules: [{name: c, count_only: {status: [201, 4xx]}, limit: {algorithm: sliding_log, rate: 10, period: 1d}}]\n"))
	f.Add([]byte("rules:\n  - {name: g, key: [global], store_mode: lease, limit: {algorithm: token_bucket, rate: 9, period: 1s}}\n  - {name: h, store_mode: sync, limit: {algorithm: token_bucket, rate: 9, period: 1s}}\n"))
	f.Add([]byte("rules: [{name: m, store_mode: \"\\u0000lease\", limit: {algorithm: fixed_window, rate: 1, period: 1s}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		s, err := Compile(c)
		if err != nil {
			t.Fatalf("parsed but does not compile: %v", err)
		}
		r := httptest.NewRequest("POST", "/v1/x", nil)
		r.Header.Set("X-A", "1")
		for _, m := range s.Match(nil, r, netip.MustParseAddr("2001:db8::1")) {
			if m.Rule.Limit.Validate() != nil {
				t.Fatal("invalid limit compiled")
			}
		}
	})
}

func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1", "1.2.3.4, 10.0.0.2", `for="[2001:db8::1]:80"`, "user")
	f.Add("[::1]:9", "garbage,,", `for=_hidden;by=x, for=unknown`, strings.Repeat("k", 300))
	f.Add("192.0.2.9:1", "", "", "{pin}user")
	ci := ClientIP{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}, IPv4Prefix: 32, IPv6Prefix: 64}
	rl, err := NewRule("r", ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Second}, Enforce, nil)
	if err != nil {
		f.Fatal(err)
	}
	key, _ := compileKey([]string{"ip", "header:X-K"}, MissingIP, ci, false)
	rl.key = key
	f.Fuzz(func(t *testing.T, peer, xff, fwd, hdr string) {
		for _, h := range []string{"X-Forwarded-For", "Forwarded"} {
			ci.Header = h
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = peer
			r.Header.Set("X-Forwarded-For", xff)
			r.Header.Set("Forwarded", fwd)
			r.Header.Set("X-K", hdr)
			a := ci.Addr(r)
			p := parseHostPort(peer)
			if p.IsValid() && !ci.trusted(p) && a != p {
				t.Fatalf("untrusted peer %s believed a header: %s", peer, a)
			}
			if p.IsValid() && !a.IsValid() {
				t.Fatalf("lost the peer's address %s", peer)
			}
			k, ok := rl.Key(r, a)
			if !ok || len(k) > len(rl.KeyPrefix())+2*maxPart+8 {
				t.Fatalf("key %q (%d bytes)", k, len(k))
			}
			if strings.ContainsAny(k, "{}") {
				t.Fatalf("key %q holds a brace: a client's hash tag", k)
			}
		}
	})
}

// TestAppendMatchesKeys checks that the keys AppendMatches builds in one
// buffer are each the rule's own key, also after a rule that matched but
// skipped the request, over more matches than the first buffer holds, and
// when dst already holds matches.
func TestAppendMatchesKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n  - name: skip\n    key: [header:X-None]\n    on_missing_key: skip\n    limit: {algorithm: fixed_window, rate: 1, period: 1s}\n")
	for i := range 12 {
		fmt.Fprintf(&b, "  - name: r%d\n    key: [ip, header:X-User-ID]\n    limit: {algorithm: fixed_window, rate: %d, period: 1s}\n", i, i+1)
	}
	c, err := Parse("m.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/x", nil)
	r.Header.Set("X-User-ID", "alice")
	ip := netip.MustParseAddr("192.0.2.7")
	prior := []Match{{Key: "kept"}}
	ms, _ := s.AppendMatches(prior, make([]byte, 0, 16), r, ip)
	if len(ms) != 13 || ms[0].Key != "kept" {
		t.Fatalf("%d matches, first %q", len(ms), ms[0].Key)
	}
	for _, m := range ms[1:] {
		want, ok := m.Rule.Key(r, ip)
		if !ok || m.Key != want {
			t.Errorf("%s: key %q, want %q", m.Rule.Name, m.Key, want)
		}
	}
}

// TestInapplicableLimitFields runs every limit field an algorithm may not
// use over every algorithm: where it applies the file is valid, where it
// cannot it is an error at its line naming the field, as serve's loader
// does (rls.TestInapplicableLimitFields).
func TestInapplicableLimitFields(t *testing.T) {
	applies := map[string][]ratekeeper.Algorithm{
		"burst: 3":           {ratekeeper.TokenBucket, ratekeeper.LeakyBucket},
		"stagger: true":      {ratekeeper.FixedWindow, ratekeeper.SlidingWindow},
		"log_rejected: true": {ratekeeper.SlidingLog},
	}
	for field, algs := range applies {
		name, _, _ := strings.Cut(field, ":")
		for _, a := range ratekeeper.Algorithms {
			t.Run(name+"/"+string(a), func(t *testing.T) {
				yaml := "rules:\n  - name: r\n    limit:\n      algorithm: " + string(a) + "\n      rate: 2\n      period: 10s\n      " + field + "\n"
				_, err := Parse("f.yaml", []byte(yaml))
				if slices.Contains(algs, a) {
					if err != nil {
						t.Fatalf("%s on %s: %v", name, a, err)
					}
					return
				}
				want := "f.yaml:7: rules[0].limit." + name + ": "
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), string(a)) {
					t.Fatalf("%s on %s: %v, want %q naming the algorithm", name, a, err, want)
				}
			})
		}
	}
}

// TestStoreModesAgree checks that two rules, or a rule and another's
// override, that decide one limit must name one store mode.
func TestStoreModesAgree(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{`rules:
  - {name: g, store_mode: lease, limit: {algorithm: token_bucket, rate: 9, period: 1s}}
  - {name: h, store_mode: sync, limit: {algorithm: token_bucket, rate: 9, period: 1s}}
`, `rules[1].store_mode: store_mode "sync", but rule "g" decides the same limit with store_mode "lease"`},
		{`rules:
  - {name: g, store_mode: lease, limit: {algorithm: token_bucket, rate: 9, period: 1s}}
  - name: h
    key: [header:X-Key]
    store_mode: exact
    limit: {algorithm: token_bucket, rate: 5, period: 1s}
    overrides: {vip: {rate: 9}}
`, `store_mode "exact", but rule "g" decides the same limit with store_mode "lease"`},
		{`rules:
  - {name: g, store_mode: bogus, limit: {algorithm: token_bucket, rate: 9, period: 1s}}
  - {name: h, store_mode: sync, limit: {algorithm: token_bucket, rate: 9, period: 1s}}
`, `rules[0].store_mode: "bogus" is not exact, sync or lease`},
		// Each rule loads its own *time.Location: the zone's name decides.
		{`rules:
  - {name: g, store_mode: lease, limit: {algorithm: fixed_window, rate: 9, calendar: daily, time_zone: Europe/Berlin}}
  - {name: h, store_mode: sync, limit: {algorithm: fixed_window, rate: 9, calendar: daily, time_zone: Europe/Berlin}}
`, `rules[1].store_mode: store_mode "sync", but rule "g" decides the same limit with store_mode "lease"`},
	} {
		_, err := Parse("t.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
	if _, err := Parse("t.yaml", []byte(`rules:
  - {name: g, store_mode: lease, limit: {algorithm: token_bucket, rate: 9, period: 1s}}
  - {name: h, store_mode: lease, limit: {algorithm: token_bucket, rate: 9, period: 1s}}
`)); err != nil {
		t.Errorf("one mode for one limit: %v", err)
	}
}
