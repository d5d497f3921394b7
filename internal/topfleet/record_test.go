package topfleet

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/topk"
)

// A record over the byte cap loses its lightest entries, and the floor
// and bound rise to cover them.
func TestEncodeShrinks(t *testing.T) {
	s := topk.NewSketch(100)
	for i := range 100 {
		s.Add(fmt.Sprintf("key-%03d", i), uint64(1000-i))
	}
	sum := s.Summary()
	r := record{V: version, Rule: "api", At: 1, Tops: []part{{Kind: "refused", Span: "1m", Bound: 0, Summary: sum}}}
	full, err := encode(r, DefaultMaxBytes)
	if err != nil {
		t.Fatal(err)
	}
	b, err := encode(r, len(full)/3)
	if err != nil || len(b) > len(full)/3 {
		t.Fatalf("%d bytes, %v; want at most %d", len(b), err, len(full)/3)
	}
	got, err := decode(b, "api", DefaultMaxBytes, DefaultMaxEntries)
	if err != nil {
		t.Fatal(err)
	}
	p := got.Tops[0]
	last := p.Entries[len(p.Entries)-1]
	if len(p.Entries) >= 100 || len(p.Entries) == 0 || p.Floor >= last.Count || p.Floor < 1000-uint64(len(p.Entries)) || p.Bound < p.Floor {
		t.Fatalf("%d entries, last %+v, floor %d, bound %d", len(p.Entries), last, p.Floor, p.Bound)
	}
	if _, err := encode(record{Rule: string(make([]byte, 200))}, 64); err == nil {
		t.Fatal("a record that cannot fit was encoded")
	}
}

// FuzzDecode: whatever another process wrote to a record's key, decode
// returns an error or a record that keeps every bound, and merging it
// with itself the most times a read does cannot overflow.
func FuzzDecode(f *testing.F) {
	good, _ := json.Marshal(record{V: version, Rule: "api", At: 5, Tops: []part{{
		Kind: "refused", Span: "1m", Bound: 3,
		Summary: topk.Summary{Entries: []topk.Entry{{Key: "a", Count: 7, Err: 2}}, Floor: 2, Total: 20},
	}}})
	f.Add(good)
	f.Add([]byte(`{"v":1,"rule":"api","tops":[{"kind":"near","span":"1h","entries":[{"key":"a","count":1},{"key":"a","count":1}],"total":2}]}`))
	f.Add([]byte(`{"v":1,"rule":"api","tops":[{"kind":"near","span":"1h","total":18446744073709551615}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode(b, "api", 4096, 16)
		if err != nil {
			return
		}
		parts := make([]topk.Summary, 0, DefaultMaxInstances)
		var bound uint64
		for _, p := range r.Tops {
			if len(p.Entries) > 16 || p.Total > maxTotal || p.Floor > p.Total {
				t.Fatalf("a part out of bounds decoded: %+v", p)
			}
			for range DefaultMaxInstances {
				parts = append(parts, p.Summary)
				bound += p.Bound
			}
			es, _ := topk.Merge(10, parts...)
			for _, e := range es {
				if e.Err > e.Count || e.Err > bound {
					t.Fatalf("merged %+v: error over its count or the bound %d", e, bound)
				}
			}
			parts, bound = parts[:0], 0
		}
	})
}
