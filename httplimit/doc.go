// Package httplimit is ratekeeper's net/http middleware: it applies one
// limit, or a whole rules set (package rules), to the requests of any
// net/http application.
//
// Every rule a request matches is decided at once, all or nothing
// (ratekeeper.TakeAll): the request passes only if every enforced rule
// allows it, and a refused request uses up no quota of the others. The
// memory store decides the rules in one atomic step, and so does Redis
// when their keys share a slot (always, except on Redis Cluster). Across
// Cluster slots, the rules allowed before one refused are refunded, which
// is exact unless another request took from the same keys in between (see
// redisstore.Store.TakeAll).
//
// Responses carry X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset for the most restrictive rule, and the IETF
// RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-
// headers-10) with one entry per rule. A refused request gets 429 with
// Retry-After (whole seconds, rounded up), X-RateLimit-Retry-After and an
// application/problem+json body naming the rule and when to retry. A client
// on the deny list gets 403.
//
// When the store could not decide and its failure policy did (package
// failsafe; ratekeeper.Decision.Fallback), the answer says only what was
// computed. A decision that counted nothing (FallbackUncounted: the allow
// and deny policies) keeps its rule's X-RateLimit-Limit and
// RateLimit-Policy, which are configuration. It sends no
// X-RateLimit-Remaining, X-RateLimit-Reset or RateLimit item. A request
// that such a decision refused gets 503 Service Unavailable, not a 429,
// with Retry-After and a problem+json body saying that the rate limiter's
// store is unavailable (a gRPC call: UNAVAILABLE). The local policy's
// decisions (FallbackLocal) are computed, on this instance's share of the
// limit, and are answered as any other. Metrics count every decision as
// before: a request the deny policy refused as limited.
//
// Shadow rules decide and report but never refuse. Queue rules (the leaky
// bucket as a shaper) hold a request until its slot in a FIFO queue, up to
// the rule's max_delay, and refuse it beyond.
//
// A rule with a ban (rules.RuleConfig.Ban) refuses every request of a key
// it refused, for the ban's duration. The ban is kept in the store, and
// checked in the same TakeAll as the rules' takes.
package httplimit
