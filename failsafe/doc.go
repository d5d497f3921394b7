// Package failsafe keeps a rate limiter answering when its shared store
// (Redis) is slow or down.
//
// A failsafe Store wraps a primary ratekeeper.Store. Each call gets a short
// timeout (WithTimeout, default 50ms). When the primary fails or times out,
// the Policy decides:
//
//   - Allow (the default) fails open: the request passes. The API stays up
//     and unlimited while the store is down.
//   - Deny fails closed: the request is refused, with RetryAfter
//     DenyRetryAfter. Nothing gets through, limited or not.
//   - Local decides with a local store that the caller gives (WithLocalStore),
//     with the limits divided by the number of instances (WithInstances).
//     Each instance enforces its share, so the total stays near the limit
//     if traffic is spread evenly.
//
// A decision the policy made says so in its Fallback field. Allow's and
// Deny's are ratekeeper.FallbackUncounted: nothing was counted, so
// Remaining and ResetAfter are zero and mean nothing, and a refusal means
// that the store is unavailable. Local's are ratekeeper.FallbackLocal, with
// the local store's own figures for the instance's share.
//
// The Store is a ratekeeper.BatchStore: TakeAll hands a batch (the rules one
// request falls under) to the primary in one call, and to the policy when
// that fails.
//
// A circuit breaker stops calls from each waiting out the timeout while the
// primary is down. After WithBreaker's threshold of consecutive failures it
// opens, and calls go straight to the policy. Once the cool-down has
// passed, the breaker probes the primary, one probe at a time. The first
// successful probe closes the breaker; nothing else closes it, not even a
// call that was in flight when it opened and succeeds after. Decisions come
// from the primary again within about a cool-down of its return.
//
// A primary that is a NetworkStore (the Redis store is one) is watched
// through its servers. Take bounds its calls by TakeBy's deadline, which
// spares a timer and a context per call. Each part (a Cluster primary) has
// a breaker of its own. An open breaker is probed in the background, so
// that no call waits on a primary that is down, however sparse the traffic.
// A failure count is reset only by a call its servers answered. Another
// primary is probed by letting one call through, which the others do not
// wait for.
//
// Decisions made by the policy are visible four ways:
//
//   - their Fallback field;
//   - Stats, which counts them by policy (FallbackAllowed, FallbackDenied,
//     FallbackLocal), which metrics export, beside the breaker's figures;
//   - WithFallbackHook, which sees each one;
//   - WithErrorHook, which sees each store error.
//
// Errors are logged to the injected *slog.Logger at most once per
// WithLogInterval, with the count of those not logged.
package failsafe
