package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/browsertest"
	"github.com/ratekeeper/ratekeeper/internal/server/adminauth"
	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
)

// wait bounds each wait on the page: a few polls of 2 s.
const wait = 15 * time.Second

// hostile is a key a client chose, shown by a rule with show_key: true.
const hostile = `<script>window.pwned=1</script><img src=x onerror="window.pwned=1">`

// heaviest is the key that the fake top lists, out of order, with the
// highest count.
const heaviest = "key:fp:9f86d081884c7d65"

// fake is a gateway seen from the dashboard: every status read is 2 s of
// fake time later, with counters grown at fixed rates.
type fake struct {
	mu     sync.Mutex
	reads  int
	reload dashboard.ReloadStatus
	query  dashboard.TopQuery
}

var epoch = time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC)

func (f *fake) status(context.Context) (dashboard.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	n := uint64(f.reads)
	return dashboard.Status{
		Time: epoch.Add(time.Duration(n) * 2 * time.Second),
		Rules: []dashboard.RuleStatus{
			// 100/s allowed, 7.0/s refused.
			{Name: "api-per-key", Mode: "enforce", Limit: "100 per 1s", Allowed: 200 * n, Refused: 14 * n},
			// 5.0/s allowed, 1.5/s that shadow mode would refuse.
			{Name: "login-per-ip", Mode: "shadow", Limit: "5 per 1m", Allowed: 10 * n, Shadow: 3 * n},
		},
		Store:  dashboard.StoreStatus{URL: "redis://:<redacted>@redis:6379/0", Mode: "sync", Healthy: true, Breaker: "closed"},
		Reload: f.reload,
	}, nil
}

func (f *fake) top(_ context.Context, q dashboard.TopQuery) (dashboard.TopAnswer, error) {
	f.mu.Lock()
	f.query = q
	f.mu.Unlock()
	return dashboard.TopAnswer{Scope: q.Scope, Span: q.Span, Rules: []dashboard.TopRule{{
		Rule: "api-per-key", Kind: dashboard.KindRefused, Span: q.Span, Total: 1200, Floor: 3, Bound: 4,
		Entries: []dashboard.TopEntry{
			{Key: "ip:10.0.0.7", Count: 41, Error: 2},
			{Key: heaviest, Count: 958, Error: 3},
			{Key: hostile, Count: 120, Error: 1},
		},
	}}}, nil
}

func (f *fake) setReload(r dashboard.ReloadStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reload = r
}

// rows returns the text of each cell of each row the selector matches.
func rows(b *browsertest.Browser, selector string) [][]string {
	var got [][]string
	b.Execute(&got, `return [...document.querySelectorAll(arguments[0])].map(tr => [...tr.cells].map(c => c.textContent));`, selector)
	return got
}

// waitRows waits until the rows the selector matches are want.
func waitRows(b *browsertest.Browser, selector string, want [][]string) {
	var got [][]string
	b.Wait(wait, func() (bool, string) {
		got = rows(b, selector)
		return slices.EqualFunc(got, want, slices.Equal), "rows " + strings.Join(flat(got), " | ")
	})
}

func flat(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, strings.Join(r, " "))
	}
	return out
}

// TestPage drives the page in Chromium against a fake gateway.
func TestPage(t *testing.T) {
	f := &fake{reload: dashboard.ReloadStatus{Time: time.Now().Add(-90 * time.Second), OK: true}}
	srv := httptest.NewServer(dashboard.New(f.status, f.top))
	defer srv.Close()
	b := browsertest.Start(t)
	b.Navigate(srv.URL + "/ui/")

	// The rules fill in, with rates from two successive reads.
	waitRows(b, "#rules tbody tr", [][]string{
		{"api-per-key", "enforce", "100 per 1s", "100", "7.0", "0.0"},
		{"login-per-ip", "shadow", "5 per 1m", "5.0", "0.0", "1.5"},
	})
	b.WaitText(wait, "#store-url", "redis://:<redacted>@redis:6379/0")
	b.WaitText(wait, "#store-breaker", "closed")
	b.WaitText(wait, "#reload-result", "ok")

	// The heaviest client first; a key holding markup shows as text.
	waitRows(b, "#top tbody tr", [][]string{
		{heaviest, "958", "± 3"},
		{hostile, "120", "± 1"},
		{"ip:10.0.0.7", "41", "± 2"},
	})
	var injected bool
	b.Execute(&injected, `return window.pwned !== undefined || document.querySelector('#top img, #top script') !== null;`)
	if injected {
		t.Error("a key was read as HTML")
	}
	f.mu.Lock()
	q := f.query
	f.mu.Unlock()
	if want := (dashboard.TopQuery{N: 10, Span: "1m", Scope: "local"}); q != want {
		t.Errorf("the page asked top for %+v, want %+v", q, want)
	}

	// Nothing is fetched from elsewhere.
	var foreign []string
	b.Execute(&foreign, `return performance.getEntriesByType('resource').map(e => e.name).filter(u => !u.startsWith(location.origin + '/'));`)
	if len(foreign) > 0 {
		t.Errorf("the page fetched %q", foreign)
	}

	screenshot(t, b)

	// A failed reload shows after the next read.
	f.setReload(dashboard.ReloadStatus{Time: time.Now(), Error: "rules.yaml:7: field limt not found"})
	b.WaitText(wait, "#reload-result", "failed: rules.yaml:7: field limt not found")
}

// screenshot writes the page to $DASHBOARD_SCREENSHOT, when it is set.
func screenshot(t *testing.T, b *browsertest.Browser) {
	path := os.Getenv("DASHBOARD_SCREENSHOT")
	if path == "" {
		return
	}
	var height int // the page's, plus the window's own
	b.Execute(&height, `return document.documentElement.scrollHeight + window.outerHeight - window.innerHeight;`)
	b.Resize(1280, height)
	if err := os.WriteFile(path, b.Screenshot(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPageToken: with reads protected, the page asks for the token, says
// when it is wrong, and shows the data once it is right.
func TestPageToken(t *testing.T) {
	const token = "s3cret-admin-token-0123"
	f := &fake{reload: dashboard.ReloadStatus{Time: epoch, OK: true}}
	guard := adminauth.New(nil, nil)
	h := dashboard.New(f.status, f.top, dashboard.WithAuthorize(func(w http.ResponseWriter, r *http.Request) bool {
		return guard.Authorize(w, r, token)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	b := browsertest.Start(t)
	b.Navigate(srv.URL + "/ui/")

	authShown := func() (bool, string) {
		var shown bool
		b.Execute(&shown, `return !document.getElementById('auth').hidden;`)
		return shown, "the token field is hidden"
	}
	submit := func(tok string) {
		b.Execute(nil, `document.getElementById('token').value = arguments[0]; document.getElementById('auth').requestSubmit();`, tok)
	}
	b.Wait(wait, authShown)
	submit("wrong-token-wrong-token")
	b.WaitText(wait, "#auth-msg", "that token was refused")
	submit(token)
	b.WaitText(wait, "#rules tbody", "api-per-key")
	b.WaitText(wait, "#top", heaviest)
	if shown, _ := authShown(); shown {
		t.Error("the token field is still shown with the data")
	}

	var where struct {
		URL     string `json:"url"`
		Session string `json:"session"`
		Local   int    `json:"local"`
	}
	b.Execute(&where, `return {url: location.href, session: sessionStorage.getItem('ratekeeper.admin-token'), local: localStorage.length};`)
	if strings.Contains(where.URL, token) || where.Session != token || where.Local != 0 {
		t.Errorf("the token is kept as %+v; want it in sessionStorage alone", where)
	}
}
