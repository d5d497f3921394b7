package main

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestDocCommands replays the commands of the package comment against the
// handler: four searches with one key (200 200 200 429), then /v1/hello,
// which passes: the per-ip rule has room left after them.
func TestDocCommands(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	h, err := handler(store, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	do := func(path string, hdr ...string) int {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "127.0.0.1:40000"
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i, want := range []int{200, 200, 200, 429} {
		if got := do("/v1/search", "X-API-Key", "k1"); got != want {
			t.Fatalf("search %d: %d, want %d", i+1, got, want)
		}
	}
	if got := do("/v1/hello"); got != 200 {
		t.Fatalf("hello after the searches: %d, want 200", got)
	}
}
