package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/rules"
)

// fiftyRules is a realistic rules file: 48 per-endpoint rules, a per-user
// rule and a global one; a request matches its endpoint's rule, the user
// rule and the global rule.
func fiftyRules() string { return fiftyRulesWith("", "") }

// fiftyRulesWith is fiftyRules with top-level fields top and the per-user
// rule's fields perUser (each line indented by four spaces) added.
func fiftyRulesWith(top, perUser string) string {
	var b strings.Builder
	b.WriteString(top + "rules:\n")
	for i := range 48 {
		fmt.Fprintf(&b, "  - name: endpoint-%d\n    match: {methods: [GET], path: /v1/items/%d}\n    key: [ip]\n    limit: {algorithm: token_bucket, rate: 1000000, period: 1s}\n", i, i)
	}
	b.WriteString("  - name: per-user\n    key: [header:X-User-ID]\n    limit: {algorithm: sliding_window, rate: 1000000000, period: 1s}\n" + perUser)
	b.WriteString("  - name: global\n    limit: {algorithm: fixed_window, rate: 1000000000, period: 1s}\n")
	return b.String()
}

// BenchmarkDecide is the middleware's decision alone (client IP, access
// lists, rule matching, keys, the memory store's all-or-nothing take) for a
// request under 3 of 50 rules, across 1024 clients.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{1, 50} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			store := memstore.New()
			defer store.Close()
			yaml := "rules:\n  - name: global\n    key: [ip]\n    limit: {algorithm: token_bucket, rate: 1000000, period: 1s}\n"
			if n == 50 {
				yaml = fiftyRules()
			}
			mw, err := New(store, mustSet(b, yaml))
			if err != nil {
				b.Fatal(err)
			}
			reqs := make([]*http.Request, 1024)
			for i := range reqs {
				r := httptest.NewRequest("GET", fmt.Sprintf("/v1/items/%d", i%48), nil)
				r.RemoteAddr = fmt.Sprintf("192.0.%d.%d:5000", i/256, i%256)
				r.Header.Set("X-User-ID", fmt.Sprint("user-", i))
				reqs[i] = r
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				s := new(scratch)
				ctx := context.Background()
				i := 0
				for pb.Next() {
					v := mw.decide(ctx, nil, reqs[i&1023], s, nil)
					if v.outcome != pass {
						b.Fatal("refused")
					}
					i++
				}
			})
		})
	}
}

// BenchmarkHandler is the whole middleware, headers included, around a
// handler that does nothing.
func BenchmarkHandler(b *testing.B) {
	store := memstore.New()
	defer store.Close()
	mw, err := New(store, mustSet(b, fiftyRules()))
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/v1/items/7", nil)
	r.RemoteAddr = "192.0.2.1:5000"
	r.Header.Set("X-User-ID", "alice")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, r)
		}
	})
}

// BenchmarkWriteHeaders is the rate limit fields alone (both styles) of a
// request under 3 of 50 rules, decided once; calendar makes the global
// rule a calendar month in Berlin, whose RateLimit-Policy item is computed
// per response.
func BenchmarkWriteHeaders(b *testing.B) {
	for _, c := range []struct{ name, from, to string }{
		{"epoch", "", ""},
		{"calendar", "rate: 1000000000, period: 1s}\n", "rate: 1000000000, calendar: monthly, time_zone: Europe/Berlin}\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			rules := fiftyRules()
			if c.from != "" {
				i := strings.LastIndex(rules, c.from)
				rules = rules[:i] + c.to + rules[i+len(c.from):]
			}
			benchmarkWriteHeaders(b, rules)
		})
	}
}

func benchmarkWriteHeaders(b *testing.B, rules string) {
	store := memstore.New()
	defer store.Close()
	mw, err := New(store, mustSet(b, rules))
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/items/7", nil)
	r.RemoteAddr = "192.0.2.1:5000"
	r.Header.Set("X-User-ID", "alice")
	s := new(scratch)
	v := mw.decide(context.Background(), nil, r, s, nil)
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		clear(h)
		mw.writeHeaders(h, v, s)
	}
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkDecideParts splits BenchmarkDecide/rules=50: "match" is the
// rules' part (client IP, matching, keys), "store" the memory store's
// all-or-nothing take of the same three keys.
func BenchmarkDecideParts(b *testing.B) {
	set := mustSet(b, fiftyRules())
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		r := httptest.NewRequest("GET", fmt.Sprintf("/v1/items/%d", i%48), nil)
		r.RemoteAddr = fmt.Sprintf("192.0.%d.%d:5000", i/256, i%256)
		r.Header.Set("X-User-ID", fmt.Sprint("user-", i))
		reqs[i] = r
	}
	b.Run("match", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var ms []rules.Match
			var buf []byte
			i := 0
			for pb.Next() {
				r := reqs[i&1023]
				ms, buf = set.AppendMatches(ms[:0], buf, r, set.ClientIP().Addr(r))
				if len(ms) != 3 {
					b.Fatal(len(ms))
				}
				i++
			}
		})
	})
	batches := make([][]ratekeeper.Request, 1024)
	for i, r := range reqs {
		for _, m := range set.Match(nil, r, set.ClientIP().Addr(r)) {
			batches[i] = append(batches[i], ratekeeper.Request{Key: m.Key, Limit: m.Rule.Limit, N: 1})
		}
	}
	b.Run("store", func(b *testing.B) {
		store := memstore.New()
		defer store.Close()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			out := make([]ratekeeper.Decision, 3)
			ctx := context.Background()
			i := 0
			for pb.Next() {
				if ok, _ := ratekeeper.TakeAll(ctx, store, batches[i&1023], out); !ok {
					b.Fatal("refused")
				}
				i++
			}
		})
	})
	// The same three keys as three independent Takes: what all-or-nothing
	// costs over deciding each rule alone.
	b.Run("store-3-takes", func(b *testing.B) {
		store := memstore.New()
		defer store.Close()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			i := 0
			for pb.Next() {
				for _, req := range batches[i&1023] {
					if d, _ := store.Take(ctx, req); !d.Allowed {
						b.Fatal("refused")
					}
				}
				i++
			}
		})
	})
}

// BenchmarkOptions is BenchmarkHandler's request (3 of 50 rules, across
// 1024 clients, headers written) with one rule option in use on the
// per-user rule, beside "off" with none: what each option costs. "refused"
// cases are a refused request, with the default answer and with a rule's
// own answer and Retry-After jitter.
func BenchmarkOptions(b *testing.B) {
	const trusted = "client_ip: {trusted_proxies: [192.0.0.0/8]}\n"
	cases := []struct {
		name, top, perUser string
		hdr                []string // added to every request
		refuse             bool
	}{
		{name: "off"},
		{name: "cost-fixed", perUser: "    cost: 5\n"},
		{name: "cost-header", perUser: "    cost: {header: X-Cost, max: 100}\n", hdr: []string{"X-Cost", "7"}},
		{name: "cost-response", perUser: "    cost: {response_header: X-Tokens, max: 100}\n"},
		{name: "overrides", perUser: "    overrides: {user-7: {rate: 900000000}, user-9: {rate: 800000000}}\n"},
		{name: "tiers", top: trusted, perUser: "    tiers: {header: X-Plan, limits: {pro: {rate: 900000000}}}\n", hdr: []string{"X-Plan", "pro"}},
		{name: "hide-headers", perUser: "    refused: {hide_headers: true}\n"},
		{name: "refused-default", refuse: true},
		{name: "refused-custom-jitter", refuse: true, perUser: "    refused: {status: 503, type: https://example.com/p, title: Busy, detail: '{rule} busy: retry in {wait} s', retry_after_jitter: 3s}\n"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			store := memstore.New()
			defer store.Close()
			yaml := fiftyRulesWith(c.top, c.perUser)
			switch {
			case c.refuse:
				yaml = strings.Replace(yaml, "sliding_window, rate: 1000000000, period: 1s}", "sliding_window, rate: 1, period: 1h}", 1)
			case c.name == "cost-response": // the token bucket's debt
				yaml = strings.Replace(yaml, "sliding_window, rate: 1000000000, period: 1s}", "token_bucket, rate: 1000000, period: 1s}", 1)
			}
			mw, err := New(store, mustSet(b, yaml))
			if err != nil {
				b.Fatal(err)
			}
			h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header()["X-Tokens"] = []string{"3"}
				w.WriteHeader(200)
			}))
			reqs := make([]*http.Request, 1024)
			for i := range reqs {
				r := httptest.NewRequest("GET", fmt.Sprintf("/v1/items/%d", i%48), nil)
				r.RemoteAddr = fmt.Sprintf("192.0.%d.%d:5000", i/256, i%256)
				r.Header.Set("X-User-ID", fmt.Sprint("user-", i))
				for j := 0; j+1 < len(c.hdr); j += 2 {
					r.Header.Set(c.hdr[j], c.hdr[j+1])
				}
				reqs[i] = r
			}
			want := 200
			if c.refuse {
				for _, r := range reqs { // each client's one request
					h.ServeHTTP(&discard{h: http.Header{}}, r)
				}
				want = 0
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := &discard{h: http.Header{}}
				i := 0
				for pb.Next() {
					clear(w.h)
					h.ServeHTTP(w, reqs[i&1023])
					if want != 0 && w.h.Get(HeaderRetryAfter) != "" {
						b.Fatal("refused")
					}
					i++
				}
			})
		})
	}
}
