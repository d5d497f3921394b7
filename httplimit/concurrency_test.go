package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

const concYAML = `
rules:
  - name: uploads
    match: {path_prefix: /up}
    key: [header:X-User-ID]
    concurrency: {max: 2}
  - name: per-user
    key: [header:X-User-ID]
    limit: {algorithm: fixed_window, rate: 100, period: 1h}
`

// blocking is a handler whose requests stay in flight until told.
type blocking struct {
	in      chan struct{}
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{in: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.in <- struct{}{}
	<-b.release
	w.Write([]byte("done"))
}

func concFixture(t *testing.T, next http.Handler) (*fixture, http.Handler) {
	f := newFixture(t, concYAML)
	return f, f.mw.Handler(next)
}

func serve(h http.Handler, path, user string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = "192.0.2.1:40000"
	r.Header.Set("X-User-ID", user)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Two requests in flight hold the two slots; a third is refused 429 with
// the headers a concurrency limit has (no reset) and took nothing from the
// rate rule; once one ends, the next passes.
func TestConcurrencyRule(t *testing.T) {
	b := newBlocking()
	f, h := concFixture(t, b)
	done := make(chan *httptest.ResponseRecorder, 2)
	for range 2 {
		go func() { done <- serve(h, "/up/1", "alice") }()
		<-b.in
	}
	w := serve(h, "/up/1", "alice")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("third in flight: %d %v", w.Code, w.Header())
	}
	hd := w.Header()
	if hd.Get(HeaderLimit) != "2" || hd.Get(HeaderRemaining) != "0" || hd.Get(HeaderReset) != "" {
		t.Errorf("legacy headers %v", hd)
	}
	if got := hd.Get(HeaderPolicy); got != `"per-user";q=100;w=3600, "uploads";q=2` {
		t.Errorf("policy %q", got)
	}
	if got := hd.Get(HeaderRateLimit); got != `"per-user";r=98;t=3600, "uploads";r=0;t=1` {
		t.Errorf("RateLimit %q", got)
	}
	// Another user has slots of their own.
	go func() { done <- serve(h, "/up/1", "bob") }()
	<-b.in
	// The rate rule was not charged for the refusal: 100 - 3 taken.
	if w := serve(f.h, "/other", "alice"); w.Header().Get(HeaderRemaining) != "97" {
		t.Errorf("rate rule after a concurrency refusal: %v", w.Header())
	}
	b.release <- struct{}{}
	if w := <-done; w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	if n := f.store.InFlight("uploads:cc:h=alice", time.Time{}) + f.store.InFlight("uploads:cc:h=bob", time.Time{}); n != 2 {
		t.Fatalf("in flight %d after one of three ended, want 2", n)
	}
	close(b.release)
	for range 2 {
		if w := <-done; w.Code != 200 || w.Header().Get(HeaderReset) != "" {
			t.Fatalf("%d %v", w.Code, w.Header())
		}
	}
	for _, k := range []string{"uploads:cc:h=alice", "uploads:cc:h=bob"} {
		if n := f.store.InFlight(k, time.Time{}); n != 0 {
			t.Fatalf("%s: %d in flight after every response ended", k, n)
		}
	}
}

// A handler that panics (the reverse proxy aborts a response whose client
// left mid-body with http.ErrAbortHandler) gives its slot back.
func TestConcurrencyReleasedOnAbort(t *testing.T) {
	f, h := concFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("partial"))
		panic(http.ErrAbortHandler)
	}))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v", v)
			}
		}()
		serve(h, "/up/1", "alice")
	}()
	if n := f.store.InFlight("uploads:cc:h=alice", time.Time{}); n != 0 {
		t.Fatalf("in flight %d after the handler aborted", n)
	}
}

// A rate refusal takes no slot.
func TestConcurrencyNotTakenOnRateRefusal(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: uploads
    key: [header:X-User-ID]
    concurrency: {max: 5}
  - name: rate
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	if w := serve(f.h, "/", "alice"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	if w := serve(f.h, "/", "alice"); w.Code != 429 || w.Header().Get(HeaderReset) == "" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	if n := f.store.InFlight("uploads:cc:h=alice", time.Time{}); n != 0 {
		t.Fatalf("in flight %d", n)
	}
}

// Admit (the gateway's fast path) defers a request that a concurrency rule
// matches, before anything is taken: it cannot see the response end.
func TestAdmitDefersConcurrency(t *testing.T) {
	f := newFixture(t, concYAML)
	r := httptest.NewRequest("GET", "/up/1", nil)
	r.Header.Set("X-User-ID", "alice")
	if a := f.mw.Admit(httptest.NewRecorder(), r, f.mw.Rules()); a != Deferred {
		t.Fatalf("Admit = %v, want Deferred", a)
	}
	r = httptest.NewRequest("GET", "/other", nil)
	if a := f.mw.Admit(httptest.NewRecorder(), r, f.mw.Rules()); a != Admitted {
		t.Fatalf("Admit of a request no concurrency rule matches = %v", a)
	}
}

type rateOnlyStore struct{ ratekeeper.Store }

func TestConcurrencyNeedsSlotStore(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	if _, err := New(rateOnlyStore{s}, mustSet(t, concYAML)); !errors.Is(err, ratekeeper.ErrNoSlots) {
		t.Fatalf("err = %v", err)
	}
}
