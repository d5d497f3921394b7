// Package sim runs ratekeeper's real limiter on a virtual clock to show how
// each algorithm, or each mode of a shared store, shapes a workload: the
// engine behind `ratekeeper simulate`.
//
// A simulation is a Config: a limit (rate, period, burst), the algorithms to
// compare, and a workload. Workers (KindWorkers) have items to do and pace
// themselves on the limiter, either asking until allowed (Allow, then waiting
// out RetryAfter) or reserving their slot (Reserve, then waiting out Delay,
// as Limiter.Wait does); they may pause. Traffic (KindTraffic) is one-shot
// requests from many seeded clients (quiet, steady and bursty), each decision
// judged against an exact sliding window log.
//
// Every algorithm runs through ratekeeper.New over a Store (a fresh memory
// store by default, or any Store such as Redis) with ratekeeper.WithClock set
// to a virtual clock that jumps from one event to the next: nothing sleeps, so
// ten simulated seconds take milliseconds, and the same Config gives the same
// Result every time. Result writes the counts per tick as CSV, the summary as
// a table or JSON, and the charts as SVG and PNG.
//
// A SharedConfig is one limit that instances behind a load balancer share
// through one store (internal/shared's engine over its in-memory model of
// the Redis scripts), run in exact mode and in sync and lease modes at each
// sync period: the engines run without their loop and the simulator syncs
// them every period of virtual time. RunShared returns a SharedResult, which
// writes the requests admitted per window and the chart of them against the
// limit and sync's bound.
//
// A ConcurrencyConfig is a concurrency limit (ratekeeper.Concurrency's Max)
// under requests that arrive evenly and are each held a while, on the memory
// store's slots: RunConcurrency returns a ConcurrencyResult, which writes
// what was in flight and what was admitted and refused per tick, with
// Little's law (L = λW) for what was offered and for what was admitted.
package sim
