package gateway

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// banGatewayOn is a gateway on store (a URL) with the login rule: five
// logins per 15 minutes, then an hour's ban.
func banGatewayOn(t *testing.T, store string) *Gateway {
	return banGatewayMode(t, store, "")
}

// banGatewayMode is banGatewayOn with the store in mode (empty: exact).
func banGatewayMode(t *testing.T, store, mode string) *Gateway {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	return newTestGateway(t, `upstream: builtin:demo
admin: {reset: true, token_file: `+tok+`}
store: {url: "`+store+`", mode: "`+mode+`"}
rules:
  - name: login
    match: {methods: [POST], path: /login}
    key: [ip]
    limit: {algorithm: sliding_log, rate: 5, period: 15m}
    ban: 1h
`)
}

// login posts to /login through g from 192.0.2.5 and returns the status
// and Retry-After in seconds (0 without one).
func login(t *testing.T, g *Gateway) (int, int) {
	t.Helper()
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "192.0.2.5:4000"
	w := httptest.NewRecorder()
	g.handler.ServeHTTP(w, r)
	ra := 0
	if s := w.Header().Get("Retry-After"); s != "" {
		var err error
		if ra, err = strconv.Atoi(s); err != nil {
			t.Fatalf("Retry-After %q", s)
		}
	}
	return w.Code, ra
}

// TestBanAcrossGateways is the login rule on two gateways sharing Redis
// (the real clock: figures are asserted as ranges): the sixth login on A
// bans the address on B too, B's state shows the ban, B's reset lifts it
// for both, and the ban is counted once.
func TestBanAcrossGateways(t *testing.T) {
	url := redistest.Server(t)
	a, b := banGatewayOn(t, url), banGatewayOn(t, url)
	for i := range 5 {
		if code, _ := login(t, a); code != 200 {
			t.Fatalf("login %d on A: %d", i, code)
		}
	}
	if code, ra := login(t, a); code != 429 || ra < 3590 || ra > 3600 {
		t.Fatalf("sixth login on A: %d Retry-After %d, want 429 and the hour's ban", code, ra)
	}
	if code, ra := login(t, b); code != 429 || ra < 3590 || ra > 3600 {
		t.Fatalf("B: %d Retry-After %d, want 429 and the ban", code, ra)
	}
	const q = "/v1/rules/login/state?ip=192.0.2.5&method=POST&path=/login"
	st := adminStateOf(t, b, "GET", q)
	until, err := time.Parse(time.RFC3339Nano, st.BannedUntil)
	if err != nil || st.Allowed == nil || *st.Allowed || st.BannedFor < 3590 || st.BannedFor > 3600 ||
		st.RetryAfter != st.BannedFor || time.Until(until) > time.Hour || time.Until(until) < 59*time.Minute {
		t.Fatalf("state on B: %+v (%v)", st, err)
	}
	st = adminStateOf(t, b, "POST", "/v1/rules/login/reset?ip=192.0.2.5&method=POST&path=/login")
	if !st.Reset || st.BannedUntil != "" || st.Allowed == nil || !*st.Allowed || st.Remaining != 5 {
		t.Fatalf("after reset: %+v", st)
	}
	if code, _ := login(t, a); code != 200 {
		t.Fatalf("A after B's reset: %d", code)
	}
	bans := func(g *Gateway) float64 { return testutil.ToFloat64(g.metrics.Bans("login").(prometheus.Counter)) }
	if bans(a) != 1 || bans(b) != 0 {
		t.Fatalf("bans counted A %v B %v, want 1 and 0", bans(a), bans(b))
	}
}

// TestBanStateMemory: on the memory store the state shows the ban too,
// and a key never banned shows none.
func TestBanStateMemory(t *testing.T) {
	g := banGatewayOn(t, "memory://")
	if w := adminDo(g, "GET", "/v1/rules", ""); !strings.Contains(w.Body.String(), `"ban_seconds": 3600`) {
		t.Fatalf("GET /v1/rules: %s", w.Body)
	}
	const q = "/v1/rules/login/state?ip=192.0.2.5&method=POST&path=/login"
	if st := adminStateOf(t, g, "GET", q); st.BannedUntil != "" || st.BannedFor != 0 || !*st.Allowed {
		t.Fatalf("before: %+v", st)
	}
	for range 6 {
		login(t, g)
	}
	if st := adminStateOf(t, g, "GET", q); st.BannedFor < 3590 || *st.Allowed {
		t.Fatalf("banned: %+v", st)
	}
}

// TestBanInSyncAndLease: in the sync and lease modes, where the limit is
// decided locally, the ban is still kept in Redis at once, so a ban that
// gateway A starts refuses the key on B from B's next request.
func TestBanInSyncAndLease(t *testing.T) {
	for _, mode := range []string{"sync", "lease"} {
		t.Run(mode, func(t *testing.T) {
			url := redistest.Server(t)
			a, b := banGatewayMode(t, url, mode), banGatewayMode(t, url, mode)
			code, ra := 0, 0
			for range 6 {
				if code, ra = login(t, a); code == 429 {
					break
				}
			}
			if code != 429 || ra < 3590 || ra > 3600 {
				t.Fatalf("A: %d Retry-After %d, want 429 and the ban", code, ra)
			}
			if code, ra := login(t, b); code != 429 || ra < 3590 || ra > 3600 {
				t.Fatalf("B: %d Retry-After %d, want 429 and the ban", code, ra)
			}
		})
	}
}

// TestBanSurvivesReload: a reload that changes the rule's limit (rate,
// period, algorithm) keeps a running ban to its end, on the memory store
// and on Redis. A changed ban duration applies to bans that start after
// it: a running one ends when it was set to. A rule without ban refuses
// no one for it.
func TestBanSurvivesReload(t *testing.T) {
	for name, store := range map[string]func(*testing.T) string{
		"memory": func(*testing.T) string { return "memory://" },
		"redis":  func(t *testing.T) string { return redistest.Server(t) },
	} {
		t.Run(name, func(t *testing.T) {
			g := banGatewayOn(t, store(t))
			for range 5 {
				login(t, g)
			}
			if code, ra := login(t, g); code != 429 || ra < 3590 || ra > 3600 {
				t.Fatalf("sixth login: %d Retry-After %d, want 429 and the hour's ban", code, ra)
			}
			reload := func(limit, ban string) {
				t.Helper()
				b, err := os.ReadFile(g.path)
				if err != nil {
					t.Fatal(err)
				}
				head, _, _ := strings.Cut(string(b), "    limit:")
				if err := os.WriteFile(g.path, []byte(head+"    limit: "+limit+"\n"+ban), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := g.Reload(); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []struct{ limit, ban string }{
				{"{algorithm: sliding_log, rate: 50, period: 15m}", "    ban: 1h\n"},
				{"{algorithm: token_bucket, rate: 100, period: 1m}", "    ban: 1h\n"},
				{"{algorithm: token_bucket, rate: 100, period: 1m}", "    ban: 2h\n"},
				{"{algorithm: token_bucket, rate: 100, period: 1m}", "    ban: 10m\n"},
			} {
				reload(c.limit, c.ban)
				if code, ra := login(t, g); code != 429 || ra < 3590 || ra > 3600 {
					t.Errorf("after a reload to %s %s: %d Retry-After %d, want 429 and what the hour's ban has left", c.limit, strings.TrimSpace(c.ban), code, ra)
				}
			}
			reload("{algorithm: token_bucket, rate: 100, period: 1m}", "")
			if code, _ := login(t, g); code != 200 {
				t.Errorf("without ban: %d, want 200", code)
			}
		})
	}
}

// TestBanDuringOutage: while Redis does not answer, the failure policy
// decides the ban's check like any other call, so allow and local admit
// a banned key (local within its share of the limit, starting no ban) and
// deny refuses it as it refuses everyone. The ban, still in Redis, refuses
// the key again once Redis answers.
func TestBanDuringOutage(t *testing.T) {
	for _, c := range []struct {
		policy string
		code   int // a banned key's login while Redis is down
	}{{"allow", 200}, {"local", 200}, {"deny", 503}} {
		t.Run(c.policy, func(t *testing.T) {
			srv := redistest.Start(t)
			g := newTestGateway(t, `upstream: builtin:demo
store: {url: "`+srv.URL()+`", on_error: `+c.policy+`, timeout: 300ms}
rules:
  - name: login
    match: {methods: [POST], path: /login}
    key: [ip]
    limit: {algorithm: sliding_log, rate: 5, period: 15m}
    ban: 1h
`)
			for range 5 {
				login(t, g)
			}
			if code, ra := login(t, g); code != 429 || ra < 3590 {
				t.Fatalf("sixth login: %d Retry-After %d, want the ban", code, ra)
			}
			srv.Pause()
			for i := range 3 {
				if code, _ := login(t, g); code != c.code {
					t.Errorf("login %d of a banned key with Redis down: %d, want %d", i, code, c.code)
				}
			}
			if c.policy == "local" { // the local limit refuses, and bans no one
				for range 3 {
					login(t, g)
				}
				if code, ra := login(t, g); code != 429 || ra > 15*60 {
					t.Errorf("past the local limit: %d Retry-After %d, want 429 by the limit alone", code, ra)
				}
			}
			srv.Resume()
			deadline := time.Now().Add(20 * time.Second)
			for {
				code, ra := login(t, g)
				if code == 429 && ra > 15*60 {
					break // banned again by what Redis kept
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis back: %d Retry-After %d, want the ban again", code, ra)
				}
				time.Sleep(10 * time.Millisecond) // polling, bounded above
			}
		})
	}
}
