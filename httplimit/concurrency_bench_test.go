package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratekeeper/ratekeeper/memstore"
)

// BenchmarkHandlerConcurrency is BenchmarkHandler for a request under one
// concurrency rule on the memory store: a slot taken and given back per
// request, headers included.
func BenchmarkHandlerConcurrency(b *testing.B) {
	store := memstore.New()
	defer store.Close()
	mw, err := New(store, mustSet(b, "rules:\n  - name: inflight\n    key: [ip]\n    concurrency: {max: 1000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/v1/items/7", nil)
	r.RemoteAddr = "192.0.2.1:5000"
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, r)
			if w.h.Get(HeaderLimit) == "" {
				b.Fatal("no headers")
			}
		}
	})
}
