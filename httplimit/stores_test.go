package httplimit

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
)

// plainStore hides the memory store's BatchStore, as the Redis store does,
// so the middleware takes the take-and-refund path.
type plainStore struct{ s ratekeeper.Store }

func (p plainStore) Take(ctx context.Context, r ratekeeper.Request) (ratekeeper.Decision, error) {
	return p.s.Take(ctx, r)
}
func (p plainStore) Refund(ctx context.Context, r ratekeeper.Request, d ratekeeper.Decision) error {
	return p.s.Refund(ctx, r, d)
}

func TestAllOrNothingWithoutBatchStore(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: token_bucket, rate: 3, period: 1h}
  - name: per-user
    key: [header:X-User]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	mw, err := New(plainStore{f.store}, f.mw.Rules(), WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	f.h = mw.Handler(ok)
	if w := f.do("GET", "/", "192.0.2.1", "X-User", "u"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	for range 5 {
		if w := f.do("GET", "/", "192.0.2.1", "X-User", "u"); w.Code != 429 {
			t.Fatal(w.Code)
		}
	}
	// per-ip was refunded each time: two of its three are left.
	if w := f.do("GET", "/", "192.0.2.1", "X-User", "v"); w.Code != 200 || w.Header().Get(HeaderRemaining) != "0" {
		t.Fatalf("%d remaining %q", w.Code, w.Header().Get(HeaderRemaining))
	}
	if w := f.do("GET", "/", "192.0.2.1", "X-User", "w"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	if w := f.do("GET", "/", "192.0.2.1", "X-User", "x"); w.Code != 429 {
		t.Fatal(w.Code)
	}
}

type brokenStore struct{}

func (brokenStore) Take(context.Context, ratekeeper.Request) (ratekeeper.Decision, error) {
	return ratekeeper.Decision{}, errors.New("store down")
}
func (brokenStore) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error {
	return errors.New("store down")
}

// TestStoreErrorFailsOpen: an error from the store lets the request through
// without rate limit headers, and is counted.
func TestStoreErrorFailsOpen(t *testing.T) {
	f := newFixture(t, postsYAML)
	mw, err := New(brokenStore{}, f.mw.Rules(), WithMetrics(f.mt))
	if err != nil {
		t.Fatal(err)
	}
	f.h = mw.Handler(ok)
	w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "a")
	if w.Code != 200 || w.Header().Get(HeaderLimit) != "" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	if got := f.count("posts-per-user", metrics.Error); got != 1 {
		t.Errorf("error count %v", got)
	}
}

// A refused request reads the same on a store that decides batches whole
// and on one decided key by key: the rules it did not fail say what is
// left. Key by key, the rules after the refused one are only asked, and
// adding their cost back read them one request too high.
func TestRefusalReadsAlikeOnEveryStore(t *testing.T) {
	const yaml = `
rules:
  - name: per-user
    key: [header:X-User]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: per-ip
    key: [ip]
    limit: {algorithm: token_bucket, rate: 3, period: 1h}
`
	headers := map[string]string{}
	for _, name := range []string{"batch", "key by key"} {
		f := newFixture(t, yaml)
		if name == "key by key" {
			mw, err := New(plainStore{f.store}, f.mw.Rules(), WithClock(f.clock))
			if err != nil {
				t.Fatal(err)
			}
			f.h = mw.Handler(ok)
		}
		if w := f.do("GET", "/", "192.0.2.1", "X-User", "u"); w.Code != 200 {
			t.Fatal(w.Code)
		}
		w := f.do("GET", "/", "192.0.2.1", "X-User", "u")
		if w.Code != 429 {
			t.Fatalf("%s: second request %d, want 429", name, w.Code)
		}
		headers[name] = w.Header().Get(HeaderRateLimit)
	}
	// Only r is held alike: a batch store reports the other rules' reset
	// (t) as if they had taken (a bucket's 2400 s), key by key as asked.
	want := []string{`"per-user";r=0;`, `"per-ip";r=2;`}
	for name, got := range headers {
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: RateLimit %q, want %s", name, got, w)
			}
		}
	}
}
