// Package gateway is ratekeeper's reverse proxy (ratekeeper proxy): it puts
// the limits of a rules file in front of any HTTP API.
//
// It is an httputil.ReverseProxy behind the httplimit middleware: bodies
// stream both ways, WebSocket upgrades pass through, and an unreachable
// upstream is answered 502 with a problem+json body that says so.
//
// HTTP/1.1 requests to the upstream (http:// or https://) go out on the
// serving goroutine over the gateway's own keep-alive pool
// (internal/upstream). Everything else (HTTP/2 to the upstream, upgrades)
// goes through http.Transport; upstream_transport: standard sends all
// there.
//
// In front of the direct transport, plain HTTP/1.1 requests take a fast
// path (internal/fastpath) that reads the client connection itself, in
// the wire format of internal/h1. Any other connection is handed, unread,
// to the net/http server (client_transport: standard hands them all).
// Both client paths build one view of a request (view.go) and answer with
// the same problem+json bodies (internal/problem).
//
// The rules reload on SIGHUP (the command calls Reload) and when the file
// changes. The file's size, mtime and content hash are polled. A file
// that does not validate is logged, and the rules in use keep serving. Counters live in the store, keyed by rule name and
// limit, so unchanged rules keep them across a reload. The admin listener
// serves /metrics, /healthz and /readyz.
//
// This package holds the configuration (config.go), the lifecycle (New,
// Run, Reload), the proxy and the request view; the layers under it are
// internal packages, each with one job.
package gateway
