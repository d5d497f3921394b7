// Package sim runs ratekeeper's real limiters on a virtual clock to show
// how each algorithm, store mode, concurrency limit, cost read from the
// response or calendar window shapes a workload. It is the engine behind
// `ratekeeper simulate`.
//
// A simulation is a Config, and its Kind says which simulator runs it.
// Scenario returns the named ones. Run runs any of them and returns a
// Report. A Report writes the summary as a table or JSON, the counts per
// tick as CSV, and the chart as SVG and PNG.
//
// Six simulators share the Config. Workers pace themselves on the limiter
// (KindWorkers). Traffic from many clients is judged against an exact
// sliding window log (KindTraffic). Instances share one limit through a
// store, in each of its modes (KindShared). A concurrency limit holds
// requests on the memory store's slots (KindConcurrency). A token bucket
// charges long requests their cost when they end, with or without a
// reservation at admission (KindTokens). Fixed windows that follow a time
// zone's calendar meet a month's end and daylight saving changes, beside
// windows aligned to the epoch (KindCalendar).
//
// The workers, traffic and calendar kinds run through ratekeeper.New over
// a Store. It is a fresh memory store; the first two take any Store, such
// as Redis. ratekeeper.WithClock sets a virtual clock that jumps from one
// event to the next. Nothing sleeps, so ten simulated seconds take
// milliseconds, and the same Config gives the same Report every time.
//
// The charts are drawn with package chart, which the benchmarks' charts
// share.
package sim
