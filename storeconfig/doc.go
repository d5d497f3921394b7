// Package storeconfig turns the `store:` section of a config file (or the
// shared --store* command-line flags) into a ratekeeper.Store.
//
// The URL memory:// (the default) is the embedded memory store. The URLs
// that redisstore.Open accepts (redis://, rediss://, and the Sentinel and
// Cluster forms) are the Redis store. It is wrapped in a failsafe store
// that bounds each call by Timeout. OnError decides what happens when Redis
// is slow or down. The TLS URLs take their CA, client certificate and
// server name from the tls section (or the --store-tls-* flags).
//
// Both the gateway (ratekeeper proxy) and the decision service (ratekeeper
// serve) build their store here.
package storeconfig
