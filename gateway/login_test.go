package gateway

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// loginRule is docs/gateway.md's login rule: five failed logins per 15
// minutes, then an hour's ban.
const loginRule = `
rules:
  - name: login
    match: {methods: [POST], path: /login}
    key: [ip]
    limit: {algorithm: sliding_log, rate: 5, period: 15m}
    count_only: {status: [401]}
    ban: 1h
`

// TestLoginRuleBansAfterFiveFailures is count_only and ban together, on two
// gateways sharing Redis: good logins never count, the fifth failure is
// the last let through, and the address is then banned on both for an
// hour, good password or not; another address is not.
func TestLoginRuleBansAfterFiveFailures(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ParseForm() != nil || r.PostForm.Get("password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer up.Close()
	store := redistest.Server(t)
	cfg := "upstream: " + up.URL + "\nstore: {url: \"" + store + "\"}\n" + loginRule
	a, b := newTestGateway(t, cfg), newTestGateway(t, cfg)
	try := func(g *Gateway, ip, password string) (int, int) {
		t.Helper()
		r := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"password": {password}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = ip + ":4000"
		w := httptest.NewRecorder()
		g.handler.ServeHTTP(w, r)
		ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
		return w.Code, ra
	}
	for i := range 10 {
		if code, _ := try(a, "192.0.2.5", "right"); code != 200 {
			t.Fatalf("good login %d: %d", i, code)
		}
	}
	for i, g := range []*Gateway{a, b, a, b, a} {
		if code, _ := try(g, "192.0.2.5", "wrong"); code != 401 {
			t.Fatalf("failure %d: %d, want the upstream's 401", i+1, code)
		}
	}
	for _, c := range []struct {
		g        *Gateway
		password string
	}{{b, "wrong"}, {a, "right"}, {b, "right"}} {
		if code, ra := try(c.g, "192.0.2.5", c.password); code != 429 || ra < 3590 || ra > 3600 {
			t.Fatalf("after five failures, password %q: %d Retry-After %d, want 429 and the hour's ban", c.password, code, ra)
		}
	}
	if code, _ := try(b, "192.0.2.6", "right"); code != 200 {
		t.Fatalf("another address: %d", code)
	}
}

// loginInFlight is a rule that bounds the login rule's requests in
// flight per address: count_only lets a key pass its limit by its
// requests in flight, which a brute-forcer chooses.
const loginInFlight = `
  - name: login-in-flight
    match: {methods: [POST], path: /login}
    key: [ip]
    concurrency: {max: 1}
`

// TestLoginGuessesHeldTogether: 40 wrong guesses sent together, against an
// upstream that holds each one a while. With the login rule alone, every
// one admitted before the first failure was counted reaches the upstream
// (the bound docs/gateway.md states: a brute-forcer chooses it); with one
// request in flight per address, no more than five do.
func TestLoginGuessesHeldTogether(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rules string
		least int64 // the guesses that reach the upstream: from least
		most  int64 // to most
	}{
		{"login rule alone", loginRule, 40, 40},
		{"with one in flight per address", loginRule + loginInFlight, 1, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var reached atomic.Int64
			release := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached.Add(1)
				<-release
				w.WriteHeader(http.StatusUnauthorized)
			}))
			defer up.Close()
			g := newTestGateway(t, "upstream: "+up.URL+"\n"+tt.rules)
			var wg sync.WaitGroup
			codes := make(chan int, 40)
			for range 40 {
				wg.Go(func() {
					r := httptest.NewRequest("POST", "/login", strings.NewReader("password=wrong"))
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					r.RemoteAddr = "192.0.2.9:4000"
					w := httptest.NewRecorder()
					g.handler.ServeHTTP(w, r)
					codes <- w.Code
				})
			}
			// Release the held guesses once every request was either held
			// by the upstream or answered by the gateway.
			for deadline := time.Now().Add(30 * time.Second); reached.Load()+int64(len(codes)) < 40; {
				if time.Now().After(deadline) {
					t.Fatalf("after 30 s: %d reached, %d answered", reached.Load(), len(codes))
				}
				time.Sleep(time.Millisecond) // polling, bounded above
			}
			close(release)
			wg.Wait()
			if n := reached.Load(); n < tt.least || n > tt.most {
				t.Errorf("%d guesses reached the upstream, want %d to %d", n, tt.least, tt.most)
			}
			t.Logf("%d of 40 guesses reached the upstream", reached.Load())
		})
	}
}
