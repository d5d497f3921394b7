package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// offsetYAML is a monthly quota per key whose billing day a trusted proxy
// (10.0.0.1) gives in X-Billing-Offset. acme's override writes its own
// offset; beta's takes the header's; the pro tier writes one.
const offsetYAML = `client_ip: {trusted_proxies: [10.0.0.1]}
rules:
  - name: quota
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 100, calendar: monthly, time_zone: Europe/Berlin, offset: 14d}
    offset_header: X-Billing-Offset
    overrides:
      acme: {rate: 500, offset: 1d}
      beta: {rate: 200}
    tiers:
      header: X-Plan
      limits:
        pro: {rate: 1000, offset: 2d}
`

// offsetMatch is the Match of s's one rule for a request from peer with
// key and the headers h (name, value, name, value...).
func offsetMatch(t *testing.T, s *Set, peer, key string, h ...string) Match {
	t.Helper()
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = peer + ":4000"
	r.Header.Set("X-API-Key", key)
	for i := 0; i+1 < len(h); i += 2 {
		r.Header.Add(h[i], h[i+1])
	}
	ip := s.ClientIP().Addr(r)
	ms := s.Match(nil, r, ip)
	if len(ms) != 1 {
		t.Fatalf("%d matches", len(ms))
	}
	if one, ok := ms[0].Rule.MatchOf(r, ip); !ok || one != ms[0] {
		t.Errorf("MatchOf %+v, Set.Match %+v", one, ms[0])
	}
	return ms[0]
}

func offsetSet(t *testing.T, yaml string) *Set {
	t.Helper()
	c, err := Parse("o.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOffsetHeader: a trusted proxy's header moves the client's limit and
// gives it a key of its own; the header naming the limit's own offset is
// that limit's key. An override's written offset wins over the header,
// which wins over a tier's and the rule's.
func TestOffsetHeader(t *testing.T) {
	s := offsetSet(t, offsetYAML)
	const proxy, client = "10.0.0.1", "203.0.113.7"
	day := 24 * time.Hour
	plain := offsetMatch(t, s, proxy, "bob")
	for _, tc := range []struct {
		who, key string
		h        []string
		offset   time.Duration
		rate     int
		sameKey  bool // as a request with no header
	}{
		{"no header", "bob", nil, 14 * day, 100, true},
		{"the proxy's 0s", "bob", []string{"X-Billing-Offset", "0s"}, 0, 100, false},
		{"the proxy's 3d", "bob", []string{"X-Billing-Offset", "3d"}, 3 * day, 100, false},
		{"the proxy's 345h", "bob", []string{"X-Billing-Offset", " 345h\t"}, 345 * time.Hour, 100, false},
		{"the rule's own", "bob", []string{"X-Billing-Offset", "14d"}, 14 * day, 100, true},
		{"the override's written offset", "acme", []string{"X-Billing-Offset", "3d"}, day, 500, false},
		{"an override that writes none", "beta", []string{"X-Billing-Offset", "3d"}, 3 * day, 200, false},
		{"a tier's offset", "bob", []string{"X-Plan", "pro", "X-Billing-Offset", "3d"}, 3 * day, 1000, false},
		{"a tier without the header", "bob", []string{"X-Plan", "pro"}, 2 * day, 1000, false},
	} {
		m := offsetMatch(t, s, proxy, tc.key, tc.h...)
		if l := m.Limit(); l.Offset != tc.offset || l.Rate != tc.rate || l.Calendar != ratekeeper.Monthly || l.Location.String() != "Europe/Berlin" {
			t.Errorf("%s: limit %v, want rate %d offset %v", tc.who, l, tc.rate, tc.offset)
		}
		if m.BadOffset {
			t.Errorf("%s: BadOffset", tc.who)
		}
		if want := keyPrefix("quota", m.Limit()); !strings.HasPrefix(m.Key, want) {
			t.Errorf("%s: key %q, want the prefix of its limit %q", tc.who, m.Key, want)
		}
		if tc.key == "bob" && (m.Key == plain.Key) != tc.sameKey {
			t.Errorf("%s: key %q, without the header %q", tc.who, m.Key, plain.Key)
		}
	}
	// From anyone but the proxy, the header is nothing.
	for _, peer := range []string{client, "10.0.0.2"} {
		m := offsetMatch(t, s, peer, "bob", "X-Billing-Offset", "3d", "X-Forwarded-For", proxy)
		if m.OwnOffset || m.BadOffset || m.Limit() != s.Rules[0].Limit {
			t.Errorf("peer %s: %+v", peer, m)
		}
	}
}

// TestOffsetHeaderBadValues: a value that is no offset of the limit leaves
// the limit's own, with BadOffset, and the key of a request without it.
func TestOffsetHeaderBadValues(t *testing.T) {
	s := offsetSet(t, offsetYAML)
	plain := offsetMatch(t, s, "10.0.0.1", "bob")
	for _, v := range [][]string{{"31d"}, {"744h"}, {"-1h"}, {"1ns"}, {"soon"}, {""}, {"14"}, {"1d1h"}, {"5w"},
		{"3d", "4d"}, {strings.Repeat("1", 40) + "h"}, {"9223372036854775807ns"}, {"1e3h"}, {"١d"},
		// White space that HTTP does not trim: the upstream gets it.
		{"14d\u00a0"}, {"\u008514d"}, {"14d\u2003"}} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:1"
		r.Header.Set("X-API-Key", "bob")
		r.Header["X-Billing-Offset"] = v
		m := s.Match(nil, r, s.ClientIP().Addr(r))[0]
		if !m.BadOffset || m.OwnOffset || m.Key != plain.Key || m.Limit() != s.Rules[0].Limit {
			t.Errorf("%q: %+v", v, m)
		}
	}
	// A daily tier bounds the offset by its day.
	d := offsetSet(t, strings.Replace(offsetYAML, "pro: {rate: 1000, offset: 2d}", "pro: {rate: 1000, calendar: daily}", 1))
	if m := offsetMatch(t, d, "10.0.0.1", "bob", "X-Plan", "pro", "X-Billing-Offset", "3d"); !m.BadOffset || m.Limit().Offset != 0 {
		t.Errorf("3d on a daily tier: %+v", m)
	}
	if m := offsetMatch(t, d, "10.0.0.1", "bob", "X-Plan", "pro", "X-Billing-Offset", "9h"); m.BadOffset || m.Limit().Offset != 9*time.Hour {
		t.Errorf("9h on a daily tier: %+v", m)
	}
}

// TestOffsetChangeResetsOnlyThatClient: the key of a client whose offset
// changes changes; every other client's stays.
func TestOffsetChangeResetsOnlyThatClient(t *testing.T) {
	s := offsetSet(t, offsetYAML)
	keys := func(bobs string) map[string]string {
		out := map[string]string{}
		for _, k := range []string{"alice", "bob", "carol"} {
			v := "3d"
			if k == "bob" {
				v = bobs
			}
			out[k] = offsetMatch(t, s, "10.0.0.1", k, "X-Billing-Offset", v).Key
		}
		return out
	}
	before, after := keys("3d"), keys("20d")
	for k, v := range before {
		if changed := after[k] != v; changed != (k == "bob") {
			t.Errorf("%s: %q -> %q", k, v, after[k])
		}
	}
	// Back to its old offset, bob finds its old key: the cache of hashes
	// gives what hashing does, across many offsets that share its slots.
	for i := range 200 {
		offsetMatch(t, s, "10.0.0.1", "dave", "X-Billing-Offset", strconv.Itoa(i)+"h")
	}
	if k := keys("3d")["bob"]; k != before["bob"] {
		t.Errorf("bob at 3d again: %q, was %q", k, before["bob"])
	}
}

// TestOffsetHeaderErrors: each misuse of offset_header is reported at its
// file:line and field.
func TestOffsetHeaderErrors(t *testing.T) {
	const trusted = "client_ip: {trusted_proxies: [10.0.0.1]}\n"
	const cal = "    limit: {algorithm: fixed_window, rate: 5, calendar: monthly}\n"
	for _, c := range []struct{ yaml, want string }{
		{trusted + "rules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 5, period: 1d}\n    offset_header: X-Off\n",
			`f.yaml:5: rules[0].offset_header: moves the boundaries of a calendar window, and the rule's limit has no calendar`},
		{"rules:\n  - name: a\n" + cal + "    offset_header: X-Off\n",
			`f.yaml:4: rules[0].offset_header: is believed only from client_ip.trusted_proxies, and there are none: no request could give a client its offset`},
		{trusted + "rules:\n  - name: a\n" + cal + "    offset_header: X-Plan\n    tiers: {header: X-Plan, limits: {pro: {rate: 9}}}\n",
			`f.yaml:5: rules[0].offset_header: X-Plan already names the tier`},
		{trusted + "rules:\n  - name: a\n" + cal + "    offset_header: X-Off\n    store_mode: sync\n",
			`f.yaml:6: rules[0].store_mode: decides the limits the file writes, and a client's offset (offset_header) makes a limit of its own`},
		{trusted + "rules:\n  - name: a\n    key: [header:X-K]\n" + cal + "    offset_header: X-Off\n    overrides:\n      acme: {rate: 9, period: 1h}\n",
			`f.yaml:8: rules[0].overrides.acme: has no calendar, and offset_header moves calendar boundaries`},
		{trusted + "rules:\n  - name: a\n" + cal + "    offset_header: \"X Off\"\n",
			`f.yaml:5: rules[0].offset_header: "X Off" is not a header name`},
		{trusted + "rules:\n  - name: a\n" + cal + "    offset_header: Host\n",
			`rules[0].offset_header: Host is written by the client`},
		{trusted + "rules:\n  - name: a\n" + cal + "    offset_header: X-Forwarded-For\n",
			`rules[0].offset_header: X-Forwarded-For is written by any client`},
		{trusted + "rules:\n  - name: a\n    concurrency: {max: 5}\n    offset_header: X-Off\n",
			`f.yaml:5: rules[0].offset_header: applies to rate limits, not to a concurrency rule`},
	} {
		_, err := Parse("f.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
	}
}

// TestOffsetHeaderRead: the set reads the header, and names it among
// those only a trusted proxy may pass on.
func TestOffsetHeaderRead(t *testing.T) {
	s := offsetSet(t, offsetYAML)
	names, all := s.HeadersRead()
	if all || !strings.Contains(strings.Join(names, ","), "X-Billing-Offset") {
		t.Errorf("HeadersRead %v %v", names, all)
	}
	if got := fmt.Sprint(s.ProxyHeaders()); got != "[X-Plan X-Billing-Offset]" {
		t.Errorf("ProxyHeaders %s", got)
	}
	if d := s.Rules[0].Describe(); !strings.Contains(d, "moved by the offset in X-Billing-Offset from a trusted proxy") {
		t.Errorf("Describe: %s", d)
	}
}

// keyPrefixFmt is keyPrefix as it was first written, with fmt: limitHex
// must give every limit the same hash, or every key would change.
func keyPrefixFmt(name string, l ratekeeper.Limit) string {
	b := fmt.Appendf(nil, "%s|%d|%d|%d|%t|%t", l.Algorithm, l.Rate, l.Period, l.Burst, l.Stagger, l.LogRejected)
	if l.Calendar != "" {
		b = fmt.Appendf(b, "|%s|%s|%d", l.Calendar, l.Location, l.Offset)
	}
	h := sha256.Sum256(b)
	return name + ":" + hex.EncodeToString(h[:4]) + ":"
}

func TestKeyPrefixUnchanged(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []ratekeeper.Limit{
		{Algorithm: ratekeeper.TokenBucket, Rate: 10, Period: time.Second, Burst: 20},
		{Algorithm: ratekeeper.SlidingLog, Rate: 1 << 40, Period: 90 * time.Minute, LogRejected: true},
		{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: time.Hour, Stagger: true},
		{Algorithm: ratekeeper.FixedWindow, Rate: 5, Calendar: ratekeeper.Daily},
		{Algorithm: ratekeeper.FixedWindow, Rate: 5, Calendar: ratekeeper.Monthly, Location: berlin, Offset: 14*24*time.Hour + time.Microsecond},
		{Algorithm: ratekeeper.FixedWindow, Rate: 5, Calendar: ratekeeper.Yearly, Location: time.UTC},
	} {
		if got, want := keyPrefix("r", l), keyPrefixFmt("r", l); got != want {
			t.Errorf("%v: %q, was %q", l, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		limitHex(ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Calendar: ratekeeper.Daily, Location: berlin})
	}); n != 0 {
		t.Errorf("limitHex allocates %v times", n)
	}
}

// dayWeekRE is ParseDuration's days and weeks as first written.
var dayWeekRE = regexp.MustCompile(`^([0-9]{1,6})([dw])$`)

// FuzzHeaderOffset: any header value gives a valid offset of the limit or
// none, never panics, and reads as the offset field would. ParseDuration
// agrees with its first, regular-expression form.
func FuzzHeaderOffset(f *testing.F) {
	for _, s := range []string{"14d", "9h", "345h", "0s", "30d", "31d", "1w", "-1h", "1ns", " 2d ", "1.5h", "000001d", "9999999d", "1d1h", "", "14d\u00a0"} {
		f.Add(s, uint8(2))
	}
	cals := []ratekeeper.Calendar{ratekeeper.Daily, ratekeeper.Weekly, ratekeeper.Monthly, ratekeeper.Yearly}
	f.Fuzz(func(t *testing.T, v string, ci uint8) {
		c := cals[int(ci)%len(cals)]
		d, ok := headerOffset([]string{v}, c)
		want, err := ParseDuration(v)
		httpTrimmed := strings.TrimSpace(v) == strings.Trim(v, " \t")
		if ok != (err == nil && httpTrimmed && len(v) <= maxOffsetValue && want >= 0 && want < c.MaxOffset() && want%time.Microsecond == 0) || ok && d != want {
			t.Fatalf("%q on %s: %v %v; ParseDuration %v %v", v, c, d, ok, want, err)
		}
		if ok {
			l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Calendar: c, Offset: d}
			if err := l.Validate(); err != nil {
				t.Fatalf("%q on %s: %v", v, c, err)
			}
		}
		if m := dayWeekRE.FindStringSubmatch(strings.TrimSpace(v)); m != nil {
			n, _ := strconv.Atoi(m[1])
			unit := 24 * time.Hour
			if m[2] == "w" {
				unit *= 7
			}
			if time.Duration(n) > math.MaxInt64/unit {
				if err == nil {
					t.Fatalf("%q: %v, want an error: longer than a duration", v, want)
				}
			} else if err != nil || want != time.Duration(n)*unit {
				t.Fatalf("%q: %v %v, want %v", v, want, err, time.Duration(n)*unit)
			}
		}
	})
}

// BenchmarkMatchOffsetHeader is a request's matching and keying under a
// calendar rule with offset_header: without the header, with the limit's
// own offset, and with a client's own (hashed, or found in the cache).
func BenchmarkMatchOffsetHeader(b *testing.B) {
	c, err := Parse("o.yaml", []byte(offsetYAML))
	if err != nil {
		b.Fatal(err)
	}
	s, _ := Compile(c)
	for _, bc := range []struct {
		name, value string
		varied      bool
	}{{"none", "", false}, {"own", "14d", false}, {"client", "3d", false}, {"client-31-offsets", "", true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = "10.0.0.1:4000"
				r.Header.Set("X-API-Key", "bob")
				if bc.value != "" {
					r.Header.Set("X-Billing-Offset", bc.value)
				}
				values := make([][]string, 31)
				for i := range values {
					values[i] = []string{strconv.Itoa(i) + "d"}
				}
				ip := s.ClientIP().Addr(r)
				var dst []Match
				var buf []byte
				i := 0
				for pb.Next() {
					if bc.varied {
						r.Header["X-Billing-Offset"] = values[i%31]
						i++
					}
					dst, buf = s.AppendMatches(dst[:0], buf, r, ip)
				}
			})
		})
	}
}

// BenchmarkLimitHex is what a client's offset costs without the cache:
// the limit's hash, computed.
func BenchmarkLimitHex(b *testing.B) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 100, Calendar: ratekeeper.Monthly, Location: berlin, Offset: 3 * 24 * time.Hour}
	b.ReportAllocs()
	for b.Loop() {
		limitHex(l)
	}
}
