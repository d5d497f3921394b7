// Package storeconfig turns the `store:` section of a config file (or the
// shared --store* command-line flags) into a ratekeeper.Store.
//
// memory:// (the default) is the embedded memory store. redis://, rediss://
// and the Sentinel and Cluster URL forms that redisstore.Open accepts are
// the Redis store, wrapped in a failsafe store that bounds each call by
// Timeout and decides by OnError what happens when Redis is slow or down.
// The TLS URLs take their CA, client certificate and server name from the
// tls section (or the --store-tls-* flags).
// Both the gateway (ratekeeper proxy) and the decision service (ratekeeper
// serve) build their store here.
package storeconfig
