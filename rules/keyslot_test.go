package rules

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// keySlotRules key their requests by each client-controlled part.
const keySlotRules = `rules:
  - {name: user, key: [header:X-User], limit: {algorithm: fixed_window, rate: 1, period: 1s}}
  - {name: host, key: [host], limit: {algorithm: fixed_window, rate: 1, period: 1s}}
  - {name: path, key: [path], limit: {algorithm: fixed_window, rate: 1, period: 1s}}
  - {name: route, key: [header:X-User, route], limit: {algorithm: fixed_window, rate: 1, period: 1s}}
  - {name: method, key: [method, header:X-User], limit: {algorithm: fixed_window, rate: 1, period: 1s}}
`

// keySlotRequest is the request of client n, who writes a hash tag into
// every part it controls.
func keySlotRequest(n int) *http.Request {
	r := httptest.NewRequest("POST", "/{pin}"+strconv.Itoa(n), nil)
	r.Host = "{pin}" + strconv.Itoa(n) + ".example"
	r.Header.Set("X-User", "{pin}user"+strconv.Itoa(n))
	r.Header.Set("X-Http-Method-Override", "{PIN}")
	return r
}

// A client's hash tag in a key part ("{pin}userN") does not choose the
// Redis Cluster slot of its key: 60 clients writing the same tag land on
// more than one slot, by the store's own tag. Asked of a real Cluster.
func TestClientHashTagDoesNotPickSlot(t *testing.T) {
	c, err := Parse("k.yaml", []byte(keySlotRules))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := redisstore.Open(ctx, redistest.Cluster(t))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, rl := range s.Rules {
		slots := map[int64]bool{}
		var first string
		for n := range 60 {
			k, ok := rl.Key(keySlotRequest(n), netip.MustParseAddr("192.0.2.1"))
			if !ok {
				t.Fatalf("%s: no key", rl.Name)
			}
			rk := store.Key(k, rl.Limit.Algorithm)
			if n == 0 {
				first = rk
			}
			slot, err := store.Client().ClusterKeySlot(ctx, rk).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = true
		}
		if len(slots) < 2 {
			t.Errorf("%s: 60 clients' keys (%q…) all in one Cluster slot", rl.Name, first)
		}
	}
}

// A part without braces keeps the key it had before braces were
// neutralised, so that no client's count is reset on upgrade.
func TestKeysWithoutBracesUnchanged(t *testing.T) {
	c, err := Parse("k.yaml", []byte(keySlotRules))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("HEAD", "/api/v1/x", nil)
	r.Host = "api.example"
	r.Header.Set("X-User", "alice:42#x")
	want := map[string]string{
		"user":   "h=alice:42#x",
		"host":   "api.example",
		"path":   "/api/v1/x",
		"route":  "h=alice:42#x|GET /api/v1/x",
		"method": "GET|h=alice:42#x",
	}
	for _, rl := range s.Rules {
		k, _ := rl.Key(r, netip.MustParseAddr("192.0.2.1"))
		if w := rl.KeyPrefix() + want[rl.Name]; k != w {
			t.Errorf("%s: key %q, want %q", rl.Name, k, w)
		}
	}
}
