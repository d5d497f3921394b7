package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Interface guard.
var _ ratekeeper.ConcurrencyStore = (*Store)(nil)

// slotShards is how many locks the concurrency slots are spread over.
const slotShards = 64

// slotTable holds the concurrency slots, by key: each key's leases, their
// expiry instants in µs by slot ID. Its zero value is empty and usable. A
// key goes when its last lease does; Sweep drops the expired leases of keys
// nobody asks about any more.
type slotTable struct {
	shards [slotShards]slotShard
}

type slotShard struct {
	mu   sync.Mutex
	keys map[string]map[string]int64
	_    [40]byte // keep neighbouring locks off one cache line
}

func (s *Store) slotShard(key string) *slotShard {
	return &s.slots.shards[s.hash(key).h>>1%slotShards]
}

// ttlMicros is d in µs.
func ttlMicros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// AcquireSlot drops key's expired slots and takes slot ID if fewer than Max
// are held, exactly, under the key's lock.
func (s *Store) AcquireSlot(_ context.Context, req ratekeeper.SlotRequest) (ratekeeper.Decision, error) {
	sh := s.slotShard(req.Key)
	sh.mu.Lock()
	now := s.now(req.Now)
	leases := sh.keys[req.Key]
	for id, exp := range leases {
		if exp <= now {
			delete(leases, id)
		}
	}
	d := ratekeeper.Decision{Limit: req.Max, At: time.UnixMicro(now)}
	_, again := leases[req.ID]
	if n := len(leases); n < req.Max || again {
		if leases == nil {
			if sh.keys == nil {
				sh.keys = make(map[string]map[string]int64)
			}
			leases = make(map[string]int64, 1)
			sh.keys[req.Key] = leases
		}
		leases[req.ID] = now + ttlMicros(req.TTL)
		d.Allowed = true
		d.Remaining = max(0, req.Max-len(leases))
	} else if n == 0 {
		delete(sh.keys, req.Key)
	}
	sh.mu.Unlock()
	return d, nil
}

// RefreshSlot extends slot ID to Now+TTL if it is still held.
func (s *Store) RefreshSlot(_ context.Context, req ratekeeper.SlotRequest, _ ratekeeper.Decision) (bool, error) {
	sh := s.slotShard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now(req.Now)
	leases := sh.keys[req.Key]
	exp, ok := leases[req.ID]
	if !ok {
		return false, nil
	}
	if exp <= now {
		sh.drop(req.Key, leases, req.ID)
		return false, nil
	}
	leases[req.ID] = now + ttlMicros(req.TTL)
	return true, nil
}

// ReleaseSlot frees slot ID.
func (s *Store) ReleaseSlot(_ context.Context, req ratekeeper.SlotRequest, _ ratekeeper.Decision) error {
	sh := s.slotShard(req.Key)
	sh.mu.Lock()
	if leases, ok := sh.keys[req.Key]; ok {
		sh.drop(req.Key, leases, req.ID)
	}
	sh.mu.Unlock()
	return nil
}

// drop removes lease id of key, and key with its last lease. The caller
// holds sh.mu.
func (sh *slotShard) drop(key string, leases map[string]int64, id string) {
	delete(leases, id)
	if len(leases) == 0 {
		delete(sh.keys, key)
	}
}

// InFlight is how many slots key holds at the store's clock (or at now,
// when it is not zero): what the simulator and tests read.
func (s *Store) InFlight(key string, now time.Time) int {
	sh := s.slotShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := s.now(now)
	n := 0
	for _, exp := range sh.keys[key] {
		if exp > t {
			n++
		}
	}
	return n
}

// sweepSlots drops every expired lease at now (µs), and the keys left
// without one.
func (s *Store) sweepSlots(now int64) {
	for i := range s.slots.shards {
		sh := &s.slots.shards[i]
		sh.mu.Lock()
		for key, leases := range sh.keys {
			for id, exp := range leases {
				if exp <= now {
					delete(leases, id)
				}
			}
			if len(leases) == 0 {
				delete(sh.keys, key)
			}
		}
		sh.mu.Unlock()
	}
}
