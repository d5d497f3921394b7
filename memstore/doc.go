// Package memstore is ratekeeper's in-memory Store, the embedded default for
// one process.
//
// Keys are spread over shards, each a mutex and one hash table per kind of
// state, so that concurrent callers rarely meet on a lock. The store keeps
// no key bytes: a key is known by its id, two 64-bit hashes (hash/maphash)
// under seeds drawn at New, and its state lives in the table's slot next to
// the id. A key's length therefore costs no memory, a lookup touches one
// slot, and the tables hold no pointers for the garbage collector to scan
// (except the sliding log's entries). Two keys share a state only if both
// hashes collide: among a million keys, a chance of about 2^-88. A token
// or leaky bucket takes about 44 bytes per key, a sliding window counter
// about 55. A decision on an existing key allocates nothing.
//
// Every decision takes one path, however it arrives (Take, a Limiter bound
// to the store through ratekeeper.Binder, TakeAll). The limit is prepared
// once (converted, its algorithm chosen) and cached. The key's state is
// then decided under its shard's lock by the same code, an existing bucket
// in place.
// TakeAll decides a batch all or nothing under the locks of every key
// involved: each request once, undone if another is refused. One janitor
// goroutine, stopped by Close, sweeps out keys whose state is back to fresh
// (a full bucket, a window that has passed), so idle clients cost no memory.
//
// The number of keys is capped (DefaultMaxKeys unless WithMaxKeys says
// otherwise), so that a flood of distinct keys cannot grow memory without
// bound. When a shard is full, a new key evicts, among a random sample of 8
// keys of that shard, one that is already idle or else the one closest to
// idle. An evicted client starts again with a fresh limit, so under such a
// flood a few clients may get more than their limit. The store stays within
// its memory and keeps deciding, which is the trade a server under attack
// wants. Store.Evictions counts these forced evictions.
//
// Without WithClock, the store reads the time as the monotonic clock
// anchored to the wall clock: one clock read per decision where time.Now
// takes two. A step of the wall clock (an NTP correction, an operator
// setting the date, a suspended machine waking up) therefore reaches the
// store at the janitor's next sweep. The sweep re-anchors when the two
// clocks have drifted apart by more than a millisecond. Without a janitor
// the store keeps the anchor New took. Slewing, the usual NTP adjustment, moves
// both clocks alike.
package memstore
