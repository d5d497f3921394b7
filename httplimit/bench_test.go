package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/memstore"
)

// fiftyRules is a realistic rules file: 48 per-endpoint rules, a per-user
// rule and a global one; a request matches its endpoint's rule, the user
// rule and the global rule.
func fiftyRules() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 48 {
		fmt.Fprintf(&b, "  - name: endpoint-%d\n    match: {methods: [GET], path: /v1/items/%d}\n    key: [ip]\n    limit: {algorithm: token_bucket, rate: 1000000, period: 1s}\n", i, i)
	}
	b.WriteString("  - name: per-user\n    key: [header:X-User-ID]\n    limit: {algorithm: sliding_window, rate: 1000000000, period: 1s}\n")
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
					v := mw.decide(ctx, reqs[i&1023], s)
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

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}
