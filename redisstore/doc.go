// Package redisstore is ratekeeper's Redis store: the shared state that lets
// many instances of a service enforce one limit per client.
//
// Each algorithm is one Lua script (scripts/*.lua, embedded), so each
// decision is one atomic round trip: no get-then-set races and no locks. The
// scripts run with EVALSHA and are loaded again with EVAL when the server
// answers NOSCRIPT (after a restart, a failover or SCRIPT FLUSH). They read
// the time with Redis TIME, so servers with skewed clocks agree, unless the
// request carries its own instant (a Limiter given WithClock), which they
// then use. Times are integer microseconds; internal/algo keeps every product
// below 2^53, where Lua's doubles are exact, so the scripts decide exactly as
// the memory store does (a differential test checks it).
//
// Every key has a TTL that ends when its state is back to fresh, so idle
// clients cost nothing. Each request uses one key, wrapped in a hash tag
// ("{client-key}") unless the key already holds one, so the scripts run on
// Redis Cluster. A key that holds its own tag ("user:{42}:posts") shares a
// slot with every key of the same tag.
//
// Concurrent calls are coalesced into batches, so that many callers share
// round trips. On a standalone or Sentinel-managed server a batch is one
// script run that makes each decision in turn (one command and one TIME for
// all). On Cluster it is a pipeline of one script run per decision. See
// WithAutoPipeline and docs/benchmarks.md.
//
// TakeAll (ratekeeper.BatchStore) decides several requests in one script
// run, all or none, when their keys share a slot: always on a standalone or
// Sentinel-managed server, and on Cluster when the keys share a hash tag.
// The script takes every request and, if one is refused, gives the others
// back with the algorithms' refunds before anything else can run. On
// Cluster the keys of different rules live in different slots, where no
// script sees them together. TakeAll then goes through ratekeeper.TakeEach:
// it takes them one by one and refunds those already taken when one is
// refused. That is exact unless another client takes from the same keys in
// between.
//
// Open accepts these URLs:
//
//	redis://[user:password@]host:port[/db][?option=value]
//	rediss://...                          the same over TLS
//	unix://[user:password@]/path/to/redis.sock[?db=N]
//	redis+sentinel://[user:password@]host1:port1,host2:port2/master-name[/db][?option=value]
//	rediss+sentinel://...                 the same over TLS
//	redis+cluster://[user:password@]host1:port1,host2:port2[?option=value]
//	rediss+cluster://...                  the same over TLS
//
// The user and password are the data nodes'; Sentinel's own credentials, if
// it has any, go in the sentinel_username and sentinel_password options.
// Other options are go-redis's URL options (dial_timeout, read_timeout,
// pool_size, ...). The TLS forms trust the system's CAs and send no client
// certificate. For a CA or a client certificate of your own, build the
// client with NewClient and WithTLSConfig and give it to New.
// docs/redis.md explains deployment.
package redisstore
