// Package metrics holds the Prometheus metrics that the gateway (ratekeeper
// proxy), the middleware and the decision service (ratekeeper serve) share,
// and the admin handler that serves them with /healthz and /readyz.
//
// Metrics are registered on the registry the caller passes, never the
// default one. No label ever carries a client key. "rule" is the name of a
// configured rule (or a descriptor's name in the decision service), so the
// number of series stays bounded by the configuration. A store's health
// comes in as plain figures (StoreHealth): the metrics know no store.
package metrics
