// Package sim runs ratekeeper's real limiters on a virtual clock to show
// how each algorithm, each mode of a shared store, or a concurrency limit
// shapes a workload: the engine behind `ratekeeper simulate`.
//
// A simulation is a Config, and its Kind says which simulator runs it.
// Scenario returns the named ones. Run runs any of them and returns a
// Report. A Report writes the summary as a table or JSON, the counts per
// tick as CSV, and the chart as SVG and PNG.
//
// KindWorkers is workers that have items to do and pace themselves on the
// limiter. They either ask until allowed (Allow, then wait out RetryAfter)
// or reserve their slot (Reserve, then wait out Delay, as Limiter.Wait
// does). They may pause.
//
// KindTraffic is one-shot requests from many seeded clients (quiet, steady
// and bursty). Each decision is judged against an exact sliding window log.
//
// KindShared is one limit that instances behind a load balancer share
// through one store. It runs in exact mode, then in sync and lease modes
// at each sync period. The engines are internal/shared's, over its
// in-memory model of the Redis scripts. They run without their loop, and
// the simulator syncs them every period of virtual time.
//
// KindConcurrency is a concurrency limit (ratekeeper.Concurrency's Max) on
// the memory store's slots, under requests that arrive evenly and are each
// held a while. Its report states Little's law (L = λW) for what was
// offered and for what was admitted.
//
// The workers and traffic kinds run every algorithm through ratekeeper.New
// over a Store. It is a fresh memory store by default, or any Store, such
// as Redis. ratekeeper.WithClock sets a virtual clock that jumps from one
// event to the next. Nothing sleeps, so ten simulated seconds take
// milliseconds, and the same Config gives the same Report every time.
//
// The charts are drawn with package chart, which the benchmarks' charts
// share.
package sim
