// Package topfleet shares the heaviest keys of every instance over Redis:
// each instance publishes its topk summaries, and any instance merges them
// all into one answer for the fleet.
//
// Each period (DefaultPeriod) an instance writes, in one pipeline, one
// string key per rule and span, "rk:top:{H}:ID:SPAN", where H hashes the
// rule's name and ID names the instance. The key expires after the TTL (DefaultTTL), so an
// instance that dies stops counting then. A sorted set per rule,
// "rk:top:{H}", indexes the instances by the time they last published.
// Both keys of a rule share its hash tag, so one MGET reads every instance
// of a rule on Redis Cluster too.
//
// A read lists the rule's instances that published within the TTL (at most
// WithMaxInstances of them), reads their summaries and merges them with
// topk.Merge. Its error bound is the sum of the instances' bounds. A
// summary that does not decode, or breaks a bound (WithMaxBytes, the
// entries per summary, the counts' invariants), is skipped, logged and
// counted (Skipped): another process may have written the key.
//
// A reader compares the time a record was published, by its publisher's
// clock, with its own: the instances' clocks must agree to well within
// the TTL.
package topfleet
