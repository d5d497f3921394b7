// Package rules is the rules file: its YAML schema (client_ip, access,
// headers, rules), its strict decoding and validation, and its compiled
// form. Every error names the file, the line and the field. The compiled
// form matches requests to rules and extracts their keys, from one view of
// each request (path.go). It depends on the root package, the standard
// library and the YAML decoder only. The gateway's file (gateway.Config)
// holds a rules file beside its own fields.
//
// A request falls under every rule whose match it satisfies; the caller
// (package httplimit) decides them all at once. Each rule's keys start with
// the rule's name and a short hash of its limit, so two rules never share a
// counter. A rule whose limit changes starts afresh, while an unchanged
// rule keeps its counters across a reload.
//
// The client IP is the TCP peer's address unless the peer is a trusted
// proxy: only then is X-Forwarded-For (or Forwarded) believed, read from the
// right past trusted hops. IPv6 clients are keyed by their /64 (configurable)
// since one host usually owns a whole prefix.
package rules
