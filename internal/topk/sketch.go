// Package topk finds the heaviest keys of a stream in bounded memory: the
// clients a rule refuses most, over a recent span of time.
//
// A Sketch is Space-Saving (Metwally, Agrawal and El Abbadi, 2005): k
// counters, each a key, its count and how much of that count may belong to
// keys it replaced. A Window keeps one Sketch per slice of its span and
// merges them when asked.
package topk

import (
	"cmp"
	"slices"
)

// Entry is one key's count. Its true count lies in [Count-Err, Count].
type Entry struct {
	Key   string `json:"key"`
	Count uint64 `json:"count"`
	Err   uint64 `json:"error"`
}

// Sketch counts the heaviest keys added to it in k counters. Every key
// added more than Total/k times holds a counter. A Sketch is not safe for
// concurrent use.
type Sketch struct {
	k     int
	total uint64
	cs    []Entry        // the counters, each in its own slot
	heap  []int          // slots, a min-heap on their Count
	pos   []int          // a slot's index in heap
	at    map[string]int // a key's slot
}

// NewSketch returns an empty Sketch of k counters (at least one).
func NewSketch(k int) *Sketch {
	k = max(k, 1)
	return &Sketch{k: k, at: make(map[string]int, k)}
}

// Add counts n more of key. A key without a counter takes the smallest
// one's place when all are held, with that count as its error.
func (s *Sketch) Add(key string, n uint64) {
	if n == 0 {
		return
	}
	s.total += n
	if c, ok := s.at[key]; ok {
		s.cs[c].Count += n
		s.down(s.pos[c])
		return
	}
	if len(s.cs) < s.k {
		c := len(s.cs)
		s.cs = append(s.cs, Entry{Key: key, Count: n})
		s.heap, s.pos = append(s.heap, c), append(s.pos, c)
		s.at[key] = c
		s.up(c)
		return
	}
	c := s.heap[0]
	least := s.cs[c].Count
	delete(s.at, s.cs[c].Key)
	s.cs[c] = Entry{Key: key, Count: least + n, Err: least}
	s.at[key] = c
	s.down(0)
}

// Total is the sum of every count added.
func (s *Sketch) Total() uint64 { return s.total }

// Floor bounds the count of every key without a counter: the smallest
// count held when all k are, else zero.
func (s *Sketch) Floor() uint64 {
	if len(s.cs) < s.k {
		return 0
	}
	return s.cs[s.heap[0]].Count
}

// Entries returns the counters held, heaviest first (ties by key).
func (s *Sketch) Entries() []Entry {
	out := slices.Clone(s.cs)
	sortEntries(out)
	return out
}

// Reset empties s, keeping its memory.
func (s *Sketch) Reset() {
	s.cs, s.heap, s.pos, s.total = s.cs[:0], s.heap[:0], s.pos[:0], 0
	clear(s.at)
}

func (s *Sketch) less(i, j int) bool { return s.cs[s.heap[i]].Count < s.cs[s.heap[j]].Count }

func (s *Sketch) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.pos[s.heap[i]], s.pos[s.heap[j]] = i, j
}

func (s *Sketch) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Sketch) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(s.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(s.heap) && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}

// Merge combines summaries of disjoint parts of a stream into the k
// heaviest keys of their union. A part that holds no counter for a key
// counted it between zero and that part's floor: the bounds of each entry
// returned hold for the union. The second result bounds the union's count
// of every key not returned.
func Merge(k int, parts ...Summary) ([]Entry, uint64) {
	type sums struct{ count, err, floors uint64 } // over the parts holding the key
	var floors uint64
	by := map[string]*sums{}
	for _, p := range parts {
		floors += p.Floor
		for _, e := range p.Entries {
			m := by[e.Key]
			if m == nil {
				m = &sums{}
				by[e.Key] = m
			}
			m.count += e.Count
			m.err += e.Err
			m.floors += p.Floor
		}
	}
	out := make([]Entry, 0, len(by))
	for key, m := range by {
		rest := floors - m.floors // the parts without the key: up to their floors
		out = append(out, Entry{Key: key, Count: m.count + rest, Err: m.err + rest})
	}
	sortEntries(out)
	floor := floors
	if len(out) > k {
		floor = max(floor, out[k].Count)
		out = out[:k]
	}
	return out, floor
}

// Summary is a Sketch's counters and floor, as kept or sent elsewhere.
type Summary struct {
	Entries []Entry `json:"entries"`
	Floor   uint64  `json:"floor"`
	Total   uint64  `json:"total"`
}

// Summary returns s's counters and floor.
func (s *Sketch) Summary() Summary {
	return Summary{Entries: s.Entries(), Floor: s.Floor(), Total: s.total}
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}
