package rls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// keyRecorder is a store that records the keys it is asked about.
type keyRecorder struct {
	ratekeeper.Store
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	k.mu.Lock()
	k.keys = append(k.keys, req.Key)
	k.mu.Unlock()
	return k.Store.Take(ctx, req)
}

// last is the key of the latest Take, or "".
func (k *keyRecorder) last() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) == 0 {
		return ""
	}
	return k.keys[len(k.keys)-1]
}

func (k *keyRecorder) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}

// newRecorded is a Service on a memory store that records its keys.
func newRecorded(t *testing.T, yaml string, opts ...Option) (*Service, *keyRecorder) {
	t.Helper()
	d, err := ParseDomain("c.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Compile(&Config{Domains: []DomainConfig{*d}})
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New(memstore.WithClock(storetest.NewClock(start)))
	t.Cleanup(func() { ms.Close() })
	rec := &keyRecorder{Store: ms}
	return NewService(rec, rules, opts...), rec
}

func decide(t *testing.T, svc *Service, domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// withOverride is d with a limit override of rpu per minute.
func withOverride(d *ratelimitv3.RateLimitDescriptor, rpu uint32) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: 2 /* MINUTE */}
	return d
}

const keyConfig = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: k
    value: v
    rate_limit: {unit: hour, requests_per_unit: 2}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
`

// TestShortValueKeysUnchanged pins the keys of values of at most 64 bytes,
// as they were before long values were bounded, so that counts survive an
// upgrade: a '|' or a leading '#' in a short value keeps it as written.
func TestShortValueKeysUnchanged(t *testing.T) {
	svc, rec := newRecorded(t, keyConfig)
	for _, c := range []struct {
		d    *ratelimitv3.RateLimitDescriptor
		want string
	}{
		{desc("k", "v"), "rls:4:edge=1:k1:v"},
		{desc("user", "alice"), "rls:4:edge_4:user5:alice"},
		{desc("path", "/api/users", "user", "alice"), "rls:4:edge*5:/api/4:path10:/api/users_4:user5:alice"},
		{desc("k", "v", "user", "#x|y"), "rls:4:edge=1:k1:v_4:user4:#x|y"},
		{desc("user", strings.Repeat("6", 64)), "rls:4:edge_4:user64:" + strings.Repeat("6", 64)},
		{withOverride(desc("k", "v"), 5), "rls:4:edge=1:k1:v|5/MINUTE"},
	} {
		decide(t, svc, "edge", c.d)
		if got := rec.last(); got != c.want {
			t.Errorf("%v: key %q, want %q", c.d, got, c.want)
		}
	}
}

// TestLongValueBoundedKey sends 60 KB values: the key that reaches the
// store stays short, and still tells the values apart.
func TestLongValueBoundedKey(t *testing.T) {
	svc, rec := newRecorded(t, keyConfig)
	long := strings.Repeat("x", 60<<10)
	for _, d := range []*ratelimitv3.RateLimitDescriptor{
		desc("user", long),
		desc("path", "/api/"+long),
		desc("k", "v", "user", long),
		desc("path", "/api/"+long, "user", long),
		withOverride(desc("user", long), 5),
		withOverride(desc(long, long), 5), // no configured limit: the override's own key
		withOverride(desc("k", "v", long, "x"), 5),
	} {
		decide(t, svc, "edge", d)
		if k := rec.last(); len(k) > 128 {
			t.Errorf("%.40v…: a key of %d bytes: %.80q…", d, len(k), k)
		}
	}
	// The same long value shares a count; one byte more is another count.
	if r := decide(t, svc, "edge", desc("user", long)); r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("the same value again: %v", r)
	}
	if r := decide(t, svc, "edge", desc("user", long+"y")); r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("another long value shares a count: %v", r)
	}
}

// TestValuesCannotForgeKeys sends pairs of descriptors whose values hold
// the key's separators, or a long value's hashed field: each keeps its own
// count (a limit of 1: the second of a pair would be refused if it shared
// the first's key).
func TestValuesCannotForgeKeys(t *testing.T) {
	const cfg = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
    descriptors:
      - key: j
        rate_limit: {unit: hour, requests_per_unit: 1}
`
	long := strings.Repeat("z", 1000)
	sum := sha256.Sum256([]byte(long))
	hashed := "#" + hex.EncodeToString(sum[:16])
	for _, pair := range [][2]*ratelimitv3.RateLimitDescriptor{
		{desc("k", "a", "j", "b"), desc("k", "a_1:j1:b")},
		{desc("k", "a", "j", "b"), desc("k", "1:a_1:j1:b")},
		{desc("k", long), desc("k", hashed)},
		{desc("k", long), desc("k", "33:"+hashed)},
		{withOverride(desc("k", "v"), 5), desc("k", "v|5/MINUTE")},
		// Keys and values of descriptors without a configured limit,
		// counted by their override alone.
		{withOverride(desc("a", "b_c"), 1), withOverride(desc("a_b", "c"), 1)},
		{withOverride(desc("a", "b.x_y"), 1), withOverride(desc("a", "b", "x", "y"), 1)},
		{withOverride(desc("a", long), 1), withOverride(desc("a", hashed), 1)},
		{withOverride(desc("k", "a", "x", "y"), 1), withOverride(desc("k", "a", "x", "y|1/MINUTE"), 1)},
	} {
		svc, rec := newRecorded(t, cfg)
		a := decide(t, svc, "d", pair[0])
		ka := rec.last()
		b := decide(t, svc, "d", pair[1])
		if a.OverallCode != ok || b.OverallCode != ok || rec.last() == ka {
			t.Errorf("%.60v and %.60v share key %.100q", pair[0], pair[1], ka)
		}
	}
}

// FuzzDescriptorKeyInjective builds the keys of two descriptors, each of
// one or two entries matched exactly, by any value, by a wildcard, or not
// at all (counted by a limit override), and checks that the keys read back
// (parseKey) as the descriptors they were built from: then no two
// descriptors share a key, whatever bytes their values hold. A request's
// value (or an override's key) longer than maxField, or holding a brace,
// reads back as its hash, and never reaches the key as written.
func FuzzDescriptorKeyInjective(f *testing.F) {
	f.Add("d", "a", "b_c", "", "", uint8(0x1f), "d", "a_b", "c", "", "", uint8(0x1f))
	f.Add("d", "a", "b.x_y", "", "", uint8(0x1f), "d", "a", "b", "x", "y", uint8(0x7f))
	f.Add("d", "k", "a", "j", "b", uint8(0x45), "d", "k", "a_1:j1:b", "", "", uint8(0x01))
	f.Add("d", "k", "v", "", "", uint8(0x10), "d", "k", "v|1/MINUTE", "", "", uint8(0x01))
	f.Add("d", "k", strings.Repeat("x", 100), "", "", uint8(0x01), "d", "k", "#0123", "", "", uint8(0x01))
	f.Add("e", "path", "/api/x", "user", "1", uint8(0x46), "e", "path", "/api/x", "user", "1", uint8(0x45))
	f.Add("e", "user", "{pin}1", "{x}", "}{", uint8(0x45), "e", "user", "{pin}2", "{x}", "}{", uint8(0x7d))
	f.Fuzz(func(t *testing.T, d1, k1, v1, k2, v2 string, m1 uint8, d3, k3, v3, k4, v4 string, m2 uint8) {
		key1, what1, bound1 := fuzzKey(d1, k1, v1, k2, v2, m1)
		key2, what2, bound2 := fuzzKey(d3, k3, v3, k4, v4, m2)
		for _, c := range []struct {
			key, what string
			bound     int
		}{{key1, what1, bound1}, {key2, what2, bound2}} {
			if got, err := parseKey(c.key); err != nil || got != c.what {
				t.Fatalf("key %q reads back as %s (%v), want %s", c.key, got, err, c.what)
			}
			if len(c.key) > c.bound {
				t.Fatalf("key of %d bytes, more than %d: %q", len(c.key), c.bound, c.key)
			}
		}
		if key1 == key2 && what1 != what2 {
			t.Fatalf("%s and %s share key %q", what1, what2, key1)
		}
	})
}

// fuzzKey is the key of a descriptor of one entry (m&0x40 == 0) or two,
// each matched as m says (2 bits per entry: exact, any value, wildcard on
// half the value, no match), with an override when m&0x10 or an entry did
// not match; what is the descriptor as parseKey should read it from the
// key, and bound the longest the key may be.
func fuzzKey(domain, k1, v1, k2, v2 string, m uint8) (key, what string, bound int) {
	entries := []Entry{{k1, v1}, {k2, v2}}[:1+int(m>>6&1)]
	var path []*node
	parts := []string{fmt.Sprintf("%q", domain)}
	bound = 16 + len(domain)
	for i, e := range entries {
		switch m >> (2 * i) & 3 {
		case 0:
			path = append(path, &node{key: e.Key, value: e.Value})
		case 1:
			path = append(path, &node{key: e.Key})
		case 2:
			path = append(path, &node{key: e.Key, value: e.Value[:len(e.Value)/2], wildcard: true})
		}
		if len(path) <= i {
			break
		}
		switch n := path[i]; {
		case n.wildcard:
			parts = append(parts, fmt.Sprintf("* %q %q %s", n.value, n.key, readBack(e.Value)))
			bound += 24 + len(n.key) + len(n.value) + maxField // a short value with a brace is hashed: 33 bytes
		case n.value == "": // an exact "" is no value: it matches any
			parts = append(parts, fmt.Sprintf("_ %q %s", n.key, readBack(e.Value)))
			bound += 16 + len(n.key) + maxField // a short value with a brace is hashed: 33 bytes
		default: // the configured value, not bounded
			parts = append(parts, fmt.Sprintf("= %q %q", n.key, n.value))
			bound += 16 + len(n.key) + len(n.value)
		}
	}
	var ov *ratelimitv3.RateLimitDescriptor_RateLimitOverride
	if m&0x10 != 0 || len(path) < len(entries) {
		ov = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1 + uint32(m>>5&1), Unit: 2}
	}
	if len(path) < len(entries) { // counted by the override alone, whatever matched
		parts = []string{"override", fmt.Sprintf("%q", domain)}
		bound = 24 + len(domain)
		for _, e := range entries {
			parts = append(parts, readBack(e.Key)+" "+readBack(e.Value))
			bound += 2 * (8 + maxField)
		}
	}
	if ov != nil {
		parts = append(parts, fmt.Sprintf("|%d/%v", ov.RequestsPerUnit, ov.Unit))
		bound += 16
	}
	return descriptorKey(domain, entries, path, ov), strings.Join(parts, " "), bound
}

// readBack is a request's value as parseKey reads it back: quoted, or "#"
// and the hash if it is longer than maxField or holds a brace.
func readBack(v string) string {
	if len(v) <= maxField && !strings.ContainsAny(v, "{}") {
		return fmt.Sprintf("%q", v)
	}
	sum := sha256.Sum256([]byte(v))
	return "#" + hex.EncodeToString(sum[:hashLen])
}

// parseKey reads a store key back into what it says, in fuzzKey's terms;
// that a parser can proves that two different descriptors never share a
// key.
func parseKey(key string) (string, error) {
	bad := func() (string, error) { return "", fmt.Errorf("unreadable at %q", key) }
	field := func() (string, bool) {
		if strings.HasPrefix(key, "#") {
			if len(key) < 1+2*hashLen {
				return "", false
			}
			f := key[:1+2*hashLen]
			key = key[1+2*hashLen:]
			return f, true
		}
		i := strings.IndexByte(key, ':')
		if i <= 0 || strings.Trim(key[:i], "0123456789") != "" {
			return "", false
		}
		n, err := strconv.Atoi(key[:i])
		if err != nil || i+1+n > len(key) {
			return "", false
		}
		f := key[i+1 : i+1+n]
		key = key[i+1+n:]
		return fmt.Sprintf("%q", f), true
	}
	var parts []string
	override := strings.HasPrefix(key, "rls:override:")
	switch {
	case override:
		key = strings.TrimPrefix(key, "rls:override:")
		parts = append(parts, "override")
	case strings.HasPrefix(key, "rls:"):
		key = strings.TrimPrefix(key, "rls:")
	default:
		return bad()
	}
	domain, ok := field()
	if !ok || strings.HasPrefix(domain, "#") {
		return bad()
	}
	parts = append(parts, domain)
	for key != "" && key[0] != '|' {
		var part []string
		if !override {
			kind := key[:1]
			key = key[1:]
			part = append(part, kind)
			switch kind {
			case "*":
				prefix, ok := field()
				if !ok {
					return bad()
				}
				part = append(part, prefix)
			case "_", "=":
			default:
				return bad()
			}
		}
		k, ok1 := field()
		v, ok2 := field()
		if !ok1 || !ok2 {
			return bad()
		}
		parts = append(parts, strings.Join(append(part, k, v), " "))
	}
	if key != "" {
		parts = append(parts, key)
	}
	return strings.Join(parts, " "), nil
}

// A client's hash tag in a descriptor's value, or in an override's key,
// does not choose the Redis Cluster slot of its key: 60 clients writing
// the same tag ("{pin}userN") land on more than one slot, by the store's
// own tag. Asked of a real Cluster.
func TestClientHashTagDoesNotPickSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := redisstore.Open(ctx, redistest.Cluster(t))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, c := range []struct {
		name string
		d    func(user string) *ratelimitv3.RateLimitDescriptor
	}{
		{"any value", func(u string) *ratelimitv3.RateLimitDescriptor { return desc("user", u) }},
		{"wildcard", func(u string) *ratelimitv3.RateLimitDescriptor { return desc("path", "/api/"+u) }},
		{"nested", func(u string) *ratelimitv3.RateLimitDescriptor { return desc("k", "v", "user", u) }},
		{"override value", func(u string) *ratelimitv3.RateLimitDescriptor { return withOverride(desc("x", u), 5) }},
		{"override key", func(u string) *ratelimitv3.RateLimitDescriptor { return withOverride(desc(u, "x"), 5) }},
	} {
		svc, rec := newRecorded(t, keyConfig)
		slots := map[int64]bool{}
		for n := range 60 {
			decide(t, svc, "edge", c.d("{pin}user"+strconv.Itoa(n)))
			// The slot is the hash tag's: the algorithm's suffix does not move it.
			k := store.Key(rec.last(), ratekeeper.FixedWindow)
			slot, err := store.Client().ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = true
		}
		if len(slots) < 2 {
			t.Errorf("%s: 60 clients' keys (the last %q) all in one Cluster slot", c.name, store.Key(rec.last(), ratekeeper.FixedWindow))
		}
	}
}
