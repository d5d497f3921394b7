package memstore

// id identifies a key: its hashes under two independent random seeds, 127
// bits in all (h has its low bit set, so that no id is zero). The store
// keeps ids, not keys: two keys are taken for one only if both hashes
// collide, which for a million keys has a chance of about 2^-88.
type id struct{ h, x uint64 }

// table maps ids to values of type V stored in the table itself: open
// addressing with linear probing over one slot array. A lookup on a large
// table costs one cache miss, for the slot. A Go map of strings to pointers
// costs a control word, a slot, the key's bytes and the value. A table of
// values without pointers is never scanned by the garbage collector.
//
// The array's length need not be a power of two. An id's top 32 bits pick
// the home slot by multiply-shift, so the table can grow by half (keeping
// between 53% and 81% of its slots full) rather than double. The caller
// holds the shard's lock. Pointers returned by get and put are valid until
// the next put, delete or sweep.
type table[V any] struct {
	slots []slot[V]
	n     int
}

type slot[V any] struct {
	id id // the zero id marks an empty slot
	v  V
}

const (
	minTable = 8
	// maxLoad is the fill, in sixteenths, past which a put grows the table.
	maxLoad = 13 // 81%
)

// home is the slot where id k belongs.
func (t *table[V]) home(k id) int {
	return int((k.h >> 32) * uint64(len(t.slots)) >> 32)
}

// get returns the value of k, or nil.
func (t *table[V]) get(k id) *V {
	if t.n == 0 {
		return nil
	}
	for i := t.home(k); ; {
		s := &t.slots[i]
		if s.id == k {
			return &s.v
		}
		if s.id.h == 0 {
			return nil
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// put adds k, which must not be in the table, with the zero value, and
// returns its value to fill in.
func (t *table[V]) put(k id) *V {
	if (t.n+1)*16 > len(t.slots)*maxLoad {
		t.resize(max(minTable, len(t.slots)+len(t.slots)/2))
	}
	t.n++
	return t.place(k)
}

// place puts k in the first free slot from its home.
func (t *table[V]) place(k id) *V {
	i := t.home(k)
	for t.slots[i].id.h != 0 {
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	s := &t.slots[i]
	s.id = k
	return &s.v
}

// resize moves every entry to a new array of size slots.
func (t *table[V]) resize(size int) {
	old := t.slots
	t.slots = make([]slot[V], size)
	for i := range old {
		if s := &old[i]; s.id.h != 0 {
			*t.place(s.id) = s.v
		}
	}
}

// delete removes k if it is there.
func (t *table[V]) delete(k id) {
	if t.n == 0 {
		return
	}
	for i := t.home(k); ; {
		s := &t.slots[i]
		if s.id == k {
			t.deleteAt(i)
			return
		}
		if s.id.h == 0 {
			return
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// deleteAt empties slot i and shifts back the entries after it that would
// otherwise be cut off from their home slot by the hole, so that lookups
// never need tombstones. Only slot i and slots after it (cyclically) change.
func (t *table[V]) deleteAt(i int) {
	n := len(t.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		s := &t.slots[j]
		if s.id.h == 0 {
			break
		}
		// The entry at j may stay iff its home lies cyclically in (i, j].
		k := t.home(s.id)
		if (i < j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		t.slots[i] = *s
		i = j
	}
	t.slots[i] = slot[V]{}
	t.n--
}

// sweep removes every entry for which gone reports true. Slots are visited
// in order and a slot that a removal refills is looked at again, so every
// entry is seen at least once. The array shrinks when it is mostly empty.
func (t *table[V]) sweep(gone func(v *V) bool) (removed int) {
	for i := 0; i < len(t.slots); {
		s := &t.slots[i]
		if s.id.h != 0 && gone(&s.v) {
			t.deleteAt(i)
			removed++
			continue
		}
		i++
	}
	if len(t.slots) > minTable && t.n*16 < len(t.slots)*3 { // under 19%
		t.resize(max(minTable, t.n*2))
	}
	return removed
}

// sample calls f on up to k entries from slot start onwards (cyclically),
// stopping early when f returns true.
func (t *table[V]) sample(start, k int, f func(k id, v *V) bool) {
	if t.n == 0 {
		return
	}
	n := len(t.slots)
	i := start % n
	for seen, visited := 0, 0; seen < k && visited < n; visited++ {
		if s := &t.slots[i]; s.id.h != 0 {
			if f(s.id, &s.v) {
				return
			}
			seen++
		}
		if i++; i == n {
			i = 0
		}
	}
}
