package gateway

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// accountsUpstream creates an account for a form with an email (201) and
// refuses any other (400), counting the accounts it created.
func accountsUpstream(t *testing.T, created *atomic.Int64) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || !strings.Contains(r.PostForm.Get("email"), "@") {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		created.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// clientFrom posts from the loopback address ip.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

func postAccount(t *testing.T, c *http.Client, addr, email string) *http.Response {
	t.Helper()
	resp, err := c.PostForm("http://"+addr+"/accounts", url.Values{"email": {email}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// "One IP may create at most 10 accounts per day" (testdata/accounts.yaml,
// docs/gateway.md): failed forms never count, exactly 10 creations pass,
// the 11th is refused with Retry-After before it reaches the upstream, and
// another IP is not affected; on both client transports and both stores.
func TestAccountsPerIPCountsCreatedOnly(t *testing.T) {
	rules, err := os.ReadFile("testdata/accounts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	stores := map[string]func(*testing.T) string{
		"memory": func(*testing.T) string { return "memory://" },
		"redis":  func(t *testing.T) string { return redistest.Server(t) },
	}
	for name, store := range stores {
		for _, transport := range []string{"fast", "standard"} {
			t.Run(name+"/"+transport, func(t *testing.T) {
				var created atomic.Int64
				addr := startGateway(t, transport, accountsUpstream(t, &created), "store: {url: \""+store(t)+"\"}\n"+string(rules))
				a, b := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
				for i := range 10 {
					for range 3 {
						if got := postAccount(t, a, addr, "no-at-sign").StatusCode; got != 400 {
							t.Fatalf("bad form before creation %d: %d, want 400", i+1, got)
						}
					}
					if got := postAccount(t, a, addr, strconv.Itoa(i)+"@example.com").StatusCode; got != 201 {
						t.Fatalf("creation %d: %d, want 201", i+1, got)
					}
				}
				for _, email := range []string{"11@example.com", "no-at-sign"} {
					resp := postAccount(t, a, addr, email)
					if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
						t.Errorf("%s after 10 created: %d, Retry-After %q; want 429 with it", email, resp.StatusCode, resp.Header.Get("Retry-After"))
					}
				}
				if got := created.Load(); got != 10 {
					t.Errorf("the upstream created %d accounts for one IP, want 10", got)
				}
				if got := postAccount(t, b, addr, "b@example.com").StatusCode; got != 201 {
					t.Errorf("another IP: %d, want 201", got)
				}
				if transport == "fast" && handOffCount(addr) == 0 {
					t.Error("the fast path served a request counted by its status")
				}
			})
		}
	}
}

// The bound through the gateway: with 2 of 3 accounts left, 5 creations
// held together by a slow upstream all pass (each saw units left), so
// the key passes its limit by at most its requests in flight; after them
// the key is refused.
func TestAccountsInFlightBound(t *testing.T) {
	const inFlight = 5
	stores := map[string]func(*testing.T) string{
		"memory": func(*testing.T) string { return "memory://" },
		"redis":  func(t *testing.T) string { return redistest.Server(t) },
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			arrived, release := make(chan struct{}, inFlight), make(chan struct{})
			var created atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("slow") != "" {
					arrived <- struct{}{}
					<-release
				}
				created.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			defer up.Close()
			addr := startGateway(t, "standard", up.URL, "store: {url: \""+store(t)+"\"}\n"+`rules:
  - name: accounts-per-ip
    key: [ip]
    limit: {algorithm: fixed_window, rate: 3, period: 1d}
    count_only: {status: [201]}
`)
			c := clientFrom("127.0.0.1")
			post := func(query string) int {
				resp, err := c.Post("http://"+addr+"/accounts"+query, "", nil)
				if err != nil {
					t.Error(err)
					return 0
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := post(""); got != 201 {
				t.Fatalf("first: %d", got)
			}
			codes := make(chan int, inFlight)
			for range inFlight {
				go func() { codes <- post("?slow=1") }()
			}
			for range inFlight {
				select {
				case <-arrived:
				case <-time.After(30 * time.Second):
					t.Fatal("the creations did not all reach the upstream together")
				}
			}
			close(release)
			for range inFlight {
				if got := <-codes; got != 201 {
					t.Errorf("a creation in flight: %d, want 201", got)
				}
			}
			if got := created.Load(); got != 1+inFlight || got > 3+inFlight {
				t.Errorf("%d created, want %d: at most the limit 3 plus %d in flight", got, 1+inFlight, inFlight)
			}
			if got := post(""); got != 429 {
				t.Errorf("after the excess: %d, want 429", got)
			}
		})
	}
}

// Two gateways sharing Redis share the count: creations alternating
// between them, among failed forms, stop at 10 for the IP.
func TestAccountsTwoGatewaysShareRedis(t *testing.T) {
	rules, err := os.ReadFile("testdata/accounts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var created atomic.Int64
	up, store := accountsUpstream(t, &created), redistest.Server(t)
	extra := "store: {url: \"" + store + "\"}\n" + string(rules)
	addrs := []string{startGateway(t, "fast", up, extra), startGateway(t, "standard", up, extra)}
	c := clientFrom("127.0.0.1")
	ok := 0
	for i := range 14 {
		addr := addrs[i%2]
		postAccount(t, c, addr, "no-at-sign")
		switch got := postAccount(t, c, addr, strconv.Itoa(i)+"@example.com").StatusCode; got {
		case 201:
			ok++
		case 429:
		default:
			t.Fatalf("creation %d: %d", i, got)
		}
	}
	if ok != 10 || created.Load() != 10 {
		t.Errorf("%d admitted, %d created; want 10 of each", ok, created.Load())
	}
}
