// Package ratekeeper limits how many requests a client (a user, an API key,
// an IP address, a device) may make per period, and says clearly when a
// client is limited and for how long.
//
// A Limiter applies one Limit to many keys. A Limit is one of five
// algorithms with a rate, a period and a burst. The keys' state lives in a
// Store: memstore (in memory, the default for one process) or redisstore
// (shared by many instances). Every store gives the same decisions; package
// storetest holds the suite that checks it.
//
//	store := memstore.New()
//	defer store.Close()
//	posts, err := ratekeeper.New(store, ratekeeper.Limit{
//		Algorithm: ratekeeper.TokenBucket, Rate: 2, Period: time.Second,
//	})
//	...
//	d, err := posts.Allow(ctx, userID)
//	if err != nil { /* the store is broken */ }
//	if !d.Allowed { /* 429, retry after d.RetryAfter */ }
//
// Three ways to ask, for three kinds of callers:
//
//   - Allow decides now and never waits (an API answering 429).
//   - Reserve takes a place now and says how long to wait before proceeding
//     (the leaky bucket's FIFO queue; the token bucket's wait for tokens).
//   - Wait blocks until the request may proceed (a worker that must send at
//     most N per second and lose nothing).
//
// A refused request is a Decision with Allowed false and a nil error. Errors
// mean a broken store or bad input (ErrCost for a cost that can never pass).
//
// A Store needs only Take and Refund. It may offer more, which the package
// uses when present:
//
//   - Resetter forgets a key's state (Limiter.Reset).
//   - BatchStore decides several requests all or nothing (the gateway's
//     rules); TakeEach is the same made of single-key calls.
//   - Binder binds a Limiter to the store once, to its limit and clock, so
//     that each decision passes only a key, a cost and whether to reserve.
//   - ConcurrencyStore holds the slots of a ConcurrencyLimiter.
//
// A ConcurrencyLimiter limits requests in flight rather than a rate. A
// Permit is taken when the work starts (TryAcquire refuses at once, Acquire
// waits) and released when it ends. Slots are leases refreshed while held,
// so a dead process's come back by themselves.
//
// The root package holds only this contract and imports nothing outside the
// standard library; stores, middleware and servers live in subpackages.
package ratekeeper
