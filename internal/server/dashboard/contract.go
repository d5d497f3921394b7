package dashboard

import (
	"errors"
	"fmt"
	"iter"
	"time"
)

// The paths the Handler serves. Mount the Handler at each of them on the
// admin listener's mux.
const (
	UIPath     = "/ui/"
	StatusPath = "/v1/status"
	TopPath    = "/v1/top"
)

// Status is the answer to GET /v1/status: the process's state now.
type Status struct {
	// Time is when the counters were read. The page divides the change
	// of a counter by the change of Time to show a rate.
	Time   time.Time    `json:"time"`
	Rules  []RuleStatus `json:"rules"`
	Store  StoreStatus  `json:"store"`
	Reload ReloadStatus `json:"reload"`
}

// RuleStatus is one rule's cumulative counters. A counter that goes down
// (a restart, a rule replaced on reload) restarts the page's rate.
type RuleStatus struct {
	Name string `json:"name"`
	// Mode is the rule's mode: enforce, shadow or queue.
	Mode string `json:"mode"`
	// Limit describes the limit for people, such as "100 per 1m".
	Limit string `json:"limit,omitempty"`
	// Allowed counts the requests the rule let through.
	Allowed uint64 `json:"allowed"`
	// Refused counts the requests the rule refused.
	Refused uint64 `json:"refused"`
	// Shadow counts the requests a shadow rule would have refused.
	Shadow uint64 `json:"shadow"`
	// OverLimit counts the requests past the limit of a rule whose
	// over_limit forwarded or rerouted them (a descriptor's quota_mode).
	OverLimit uint64 `json:"over_limit,omitempty"`
}

// StoreStatus is the state of the store the rules count in.
type StoreStatus struct {
	// URL is the store's URL with any password redacted.
	URL string `json:"url"`
	// Mode is how shared limits are decided: exact, sync or lease; for
	// the memory store, "memory".
	Mode string `json:"mode"`
	// Healthy reports whether the store answered its last call.
	Healthy bool `json:"healthy"`
	// Detail says why the store is not healthy ("" when it is).
	Detail string `json:"detail,omitempty"`
	// Breaker is the circuit breaker's state: closed, open or half-open;
	// "" when the store has none.
	Breaker string `json:"breaker,omitempty"`
}

// ReloadStatus is the outcome of the last load of the configuration,
// the first one included.
type ReloadStatus struct {
	Time time.Time `json:"time"`
	// OK reports whether the configuration loaded. When it did not, the
	// previous one stays in force and Error says why.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Spans and scopes of a top query.
const (
	SpanMinute = "1m"
	SpanHour   = "1h"

	// ScopeLocal asks this process alone.
	ScopeLocal = "local"
	// ScopeFleet asks every process that shares the store; with the
	// memory store it answers as ScopeLocal.
	ScopeFleet = "fleet"
)

// Kinds of a top list.
const (
	// KindRefused lists the keys a rule refused.
	KindRefused = "refused"
	// KindNear lists the keys a rule let through close to their limit.
	KindNear = "near"
)

// Bounds and defaults of a top query's N.
const (
	DefaultN = 10
	MaxN     = 1000
)

// TopQuery is what GET /v1/top asks, from its query parameters rule, n,
// span and scope. The Handler fills in defaults and checks the values
// before it calls the top function.
type TopQuery struct {
	// Rule names the rule; "" asks for every rule.
	Rule string
	// N is how many keys to list per rule, 1 to MaxN (default DefaultN).
	N int
	// Span is SpanMinute (default) or SpanHour.
	Span string
	// Scope is ScopeLocal (default) or ScopeFleet.
	Scope string
}

// Rules is the names among all (every rule's, in order) that q asks
// for. A rule q names that is not among them is ErrUnknownRule.
func (q TopQuery) Rules(all iter.Seq[string]) ([]string, error) {
	var names []string
	for name := range all {
		if q.Rule == "" || q.Rule == name {
			names = append(names, name)
		}
	}
	if q.Rule != "" && len(names) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRule, q.Rule)
	}
	return names, nil
}

// TopAnswer is the answer to GET /v1/top.
type TopAnswer struct {
	// Scope is what answered: ScopeFleet, or ScopeLocal for a local
	// query and for a fleet query over the memory store.
	Scope string `json:"scope"`
	Span  string `json:"span"`
	// Instances counts, for ScopeFleet, the most instances merged into
	// one list; their summaries are up to a publishing period old.
	Instances int `json:"instances,omitempty"`
	// Rules holds one list per rule and kind.
	Rules []TopRule `json:"rules"`
}

// TopRule is one rule's heaviest keys of one kind over a span.
type TopRule struct {
	Rule string `json:"rule"`
	// Kind is KindRefused or KindNear.
	Kind string `json:"kind"`
	Span string `json:"span"`
	// Total counts every event of this kind over the span, listed or not.
	Total uint64 `json:"total"`
	// Floor bounds the count of any key not listed: none is above it.
	Floor uint64 `json:"floor"`
	// Bound is the summary's error bound: no Error is above it. For
	// ScopeFleet it is the sum of the instances' bounds.
	Bound uint64 `json:"bound"`
	// Entries are the heaviest keys, by Count from the highest.
	Entries []TopEntry `json:"entries"`
}

// TopEntry is one key and its count.
type TopEntry struct {
	// Key is the rule's key parts as shown: an IP with its mask applied,
	// a header's value as a fingerprint unless the rule shows keys.
	Key string `json:"key"`
	// Count is the key's estimated count over the span.
	Count uint64 `json:"count"`
	// Error bounds how far Count may be from the true count.
	Error uint64 `json:"error"`
}

// ErrUnknownRule is what a top function returns, wrapped or not, for a
// rule that does not exist. The Handler answers it with 404.
var ErrUnknownRule = errors.New("unknown rule")
