// Package fastadmit lets the gateway's fast path ask an httplimit
// Middleware for a decision without wrapping a handler, and without taking
// anything when a queue rule would hold the request: a held request goes
// to net/http, which notices a client that leaves while it waits.
package fastadmit

import "net/http"

// Result is what Admit did with a request.
type Result int

const (
	// Admitted: every rule allows the request; the rate limit headers are
	// set on the writer's header map, and the caller serves the request.
	Admitted Result = iota
	// Answered: the request was refused (429) or forbidden (403) and the
	// answer is written.
	Answered
	// Deferred: a queue rule matches; nothing was taken or written, and
	// the request should be served by the middleware's Handler.
	Deferred
)

// Admit is set by package httplimit. mw is an *httplimit.Middleware, and
// set the *rules.Set the caller read r for: when the middleware's rules are
// another set by now (a reload), the request is Deferred.
var Admit func(mw any, w http.ResponseWriter, r *http.Request, set any) Result
