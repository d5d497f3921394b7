// Package rls is ratekeeper's decision service: Envoy's rate limit service
// API (envoy.service.ratelimit.v3.RateLimitService over gRPC) and an HTTP
// JSON API, answering from any ratekeeper.Store with any of the five
// algorithms.
//
// Its configuration is the YAML of Envoy's reference rate limit service
// (github.com/envoyproxy/ratelimit). A file holds one domain and its nested
// descriptors of key and optional value; a value ending in * matches by
// prefix. A descriptor may have shadow_mode, detailed_metric and a
// rate_limit block: unit and requests_per_unit, unlimited, name and
// replaces. Existing
// files load unchanged and keep their meaning (fixed windows aligned to the
// epoch). Two keys extend rate_limit: algorithm (token_bucket, leaky_bucket,
// fixed_window, sliding_log or sliding_window; default fixed_window) and
// burst (the buckets' capacity; default requests_per_unit).
//
// Load reads a file or a directory of files, and Compile turns the result
// into Rules. A Service answers requests with them; a Server runs the
// Service on its listeners, with reloads. docs/envoy.md is the user's guide.
package rls
