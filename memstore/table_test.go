package memstore

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// entry is the tests' value: the key it belongs to, and a number.
type entry struct {
	key string
	n   int
}

// tableModel runs random puts, gets, deletes, sweeps and samples on a table
// and on a Go map side by side and fails on the first difference. hash gives
// a key's first hash: a poor one (few distinct values, or values that all
// land near the end of the array) makes long clusters that wrap around.
func tableModel(t *testing.T, rng *rand.Rand, steps, keys int, hash func(string) uint64) {
	t.Helper()
	var tb table[entry]
	model := map[string]int{}
	seed := maphash.MakeSeed()
	idOf := func(k string) id { return id{h: hash(k) | 1, x: maphash.String(seed, k)} }
	check := func(step int) {
		if tb.n != len(model) {
			t.Fatalf("step %d: table holds %d, model %d", step, tb.n, len(model))
		}
		for k, v := range model {
			p := tb.get(idOf(k))
			if p == nil || *p != (entry{k, v}) {
				t.Fatalf("step %d: get(%q) = %v, want %d", step, k, p, v)
			}
		}
		seen := 0
		for i := range tb.slots {
			if s := tb.slots[i]; s.id.h != 0 {
				seen++
				if _, ok := model[s.v.key]; !ok || s.id != idOf(s.v.key) {
					t.Fatalf("step %d: slot %d holds %q, not in the model", step, i, s.v.key)
				}
			}
		}
		if seen != len(model) {
			t.Fatalf("step %d: %d slots used, model holds %d", step, seen, len(model))
		}
	}
	for step := 0; step < steps; step++ {
		k := fmt.Sprint("k", rng.IntN(keys))
		h := idOf(k)
		switch op := rng.IntN(100); {
		case op < 45:
			if p := tb.get(h); p != nil {
				p.n++
				model[k]++
			} else {
				v := rng.IntN(1000)
				*tb.put(h) = entry{k, v}
				model[k] = v
			}
		case op < 70:
			p := tb.get(h)
			if v, ok := model[k]; ok != (p != nil) || (ok && *p != (entry{k, v})) {
				t.Fatalf("step %d: get(%q) = %v, model has %d %v", step, k, p, v, ok)
			}
		case op < 95:
			tb.delete(h)
			delete(model, k)
		case op < 98:
			// Sweep out the odd values; every entry must be offered once at
			// least, and only the odd ones removed.
			offered := map[string]bool{}
			removed := tb.sweep(func(v *entry) bool {
				offered[v.key] = true
				return v.n%2 == 1
			})
			want := 0
			for key, v := range model {
				if !offered[key] {
					t.Fatalf("step %d: sweep never offered %q", step, key)
				}
				if v%2 == 1 {
					delete(model, key)
					want++
				}
			}
			if removed != want {
				t.Fatalf("step %d: sweep removed %d, want %d", step, removed, want)
			}
		default:
			n := 0
			tb.sample(rng.IntN(1000), 8, func(k id, v *entry) bool {
				if model[v.key] != v.n || k != idOf(v.key) {
					t.Fatalf("step %d: sample gave %q=%d, model %d", step, v.key, v.n, model[v.key])
				}
				n++
				return false
			})
			if n != min(8, len(model)) {
				t.Fatalf("step %d: sample saw %d entries of %d", step, n, len(model))
			}
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(steps)
}

func TestTableMatchesMap(t *testing.T) {
	seed := maphash.MakeSeed()
	good := func(k string) uint64 { return maphash.String(seed, k) }
	few := func(k string) uint64 { return maphash.String(seed, k) % 7 << 40 }                   // long clusters
	high := func(k string) uint64 { return 0xffff_fff0_0000_0000 | maphash.String(seed, k)%16 } // all near the end: they wrap
	for i, c := range []struct {
		name string
		keys int
		hash func(string) uint64
	}{
		{"good/small", 20, good}, {"good/large", 3000, good},
		{"few-hashes", 200, few}, {"wrapping", 200, high},
	} {
		t.Run(c.name, func(t *testing.T) {
			tableModel(t, rand.New(rand.NewPCG(uint64(i), 5)), 60_000, c.keys, c.hash)
		})
	}
}

// FuzzTable drives the same model from fuzzed seeds and key counts.
func FuzzTable(f *testing.F) {
	f.Add(uint64(1), uint16(50), false)
	f.Add(uint64(2), uint16(5), true)
	seed := maphash.MakeSeed()
	f.Fuzz(func(t *testing.T, s uint64, keys uint16, poor bool) {
		hash := func(k string) uint64 { return maphash.String(seed, k) }
		if poor {
			hash = func(k string) uint64 { return maphash.String(seed, k) % 5 << 61 }
		}
		tableModel(t, rand.New(rand.NewPCG(s, 1)), 2000, 1+int(keys)%500, hash)
	})
}
