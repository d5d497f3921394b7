package httplimit

import (
	"fmt"
	"testing"
)

// FuzzAllOrNothing drives three overlapping rules (per IP, per user, and
// one global) with a random sequence of requests within one window and
// checks the middleware against a model: a request passes iff every rule it
// falls under has room, and then takes one from each; a refused request
// takes nothing.
func FuzzAllOrNothing(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 17, 17, 17, 34, 34})
	f.Fuzz(func(t *testing.T, seq []byte) {
		if len(seq) > 200 {
			seq = seq[:200]
		}
		fx := newFixture(t, `
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
  - name: per-user
    match: {headers: {X-User: "*"}}
    key: [header:X-User]
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
  - name: global
    limit: {algorithm: fixed_window, rate: 10, period: 1h}
`)
		type key struct{ rule, k string }
		used := map[key]int{}
		limit := map[string]int{"per-ip": 3, "per-user": 2, "global": 10}
		for i, b := range seq {
			ip := fmt.Sprintf("192.0.2.%d", b&3)
			user := ""
			if b&16 != 0 {
				user = fmt.Sprint("u", (b>>2)&3)
			}
			keys := []key{{"per-ip", ip}, {"global", ""}}
			hdr := []string{}
			if user != "" {
				keys = append(keys, key{"per-user", user})
				hdr = append(hdr, "X-User", user)
			}
			want := true
			for _, k := range keys {
				if used[k] >= limit[k.rule] {
					want = false
				}
			}
			if want {
				for _, k := range keys {
					used[k]++
				}
			}
			w := fx.do("GET", "/", ip, hdr...)
			if got := w.Code == 200; got != want {
				t.Fatalf("request %d (ip %s user %q): passed %v, model says %v; used %v", i, ip, user, got, want, used)
			}
		}
	})
}
