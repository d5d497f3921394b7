package storeconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// openRedis builds the Redis store, wrapped in failsafe with the
// configured timeout, policy and instance count. A bad URL, and a Redis
// that refuses the configuration, are errors (see checkAnswers).
func openRedis(ctx context.Context, c Config, logger *slog.Logger) (ratekeeper.Store, io.Closer, error) {
	policy, err := failsafe.ParsePolicy(c.OnError)
	if err != nil {
		return nil, nil, fmt.Errorf("store: on_error: %w", err)
	}
	var copts []redisstore.ClientOption
	switch {
	case c.PasswordFile != "":
		p, err := readPassword(c.PasswordFile)
		if err != nil {
			return nil, nil, fmt.Errorf("store: password_file: %w", err)
		}
		copts = append(copts, redisstore.WithPassword(p))
	case c.Password != "":
		copts = append(copts, redisstore.WithPassword(c.Password))
	}
	if !c.TLS.IsZero() {
		tc, err := c.TLS.Config(tlsconfig.Options{Logger: logger})
		if err != nil {
			return nil, nil, fmt.Errorf("store: %w", tlsError(err))
		}
		copts = append(copts, redisstore.WithTLSConfig(tc))
	}
	client, err := redisstore.NewClient(c.URL, copts...)
	if err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	rs, err := redisstore.New(client, redisstore.WithMode(redisstore.Mode(c.Mode), c.SyncPeriod), redisstore.WithLogger(logger))
	if err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	if err := checkAnswers(ctx, c, client, rs, logger); err != nil {
		rs.Close()
		client.Close()
		return nil, nil, err
	}
	opts := []failsafe.Option{
		failsafe.WithTimeout(c.Timeout),
		failsafe.WithPolicy(policy),
		failsafe.WithInstances(c.Instances),
		failsafe.WithLogger(logger),
	}
	if policy == failsafe.Local {
		opts = append(opts, failsafe.WithLocalStore(memstore.New()))
	}
	fs := failsafe.New(rs, opts...)
	return fs, closers{fs, rs, client}, nil
}

// The Redis store is watched through its servers by failsafe: a breaker
// per Cluster primary, whose failure counts only Redis's answers reset.
var _ failsafe.NetworkStore = (*redisstore.Store)(nil)

// pingTimeout bounds the check at start that Redis answers.
const pingTimeout = 2 * time.Second

// checkAnswers asks Redis, once at start, whether it answers and accepts
// the configuration, up to a probe decision. A refusal is an error,
// whatever on_error says: deciding by on_error would hide a typo. Redis
// refuses a database it does not have, a wrong password or user, a user
// that may not run the store's scripts on its keys, and the wrong kind of
// deployment. Silence is an
// error only with Require; otherwise it is logged with its cause, and
// decisions follow on_error until Redis answers.
func checkAnswers(ctx context.Context, c Config, client redis.UniversalClient, rs *redisstore.Store, logger *slog.Logger) error {
	dials := watchDials(client)
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	err := client.Ping(pctx).Err()
	if err != nil && pctx.Err() != nil {
		if last := dials.last(); last != nil {
			err = fmt.Errorf("%w (no answer within %v)", last, pingTimeout)
		}
	}
	if err == nil {
		err = checkDeployment(pctx, client)
	}
	if err == nil {
		err = rs.Probe(pctx) // a decision's script and keys: an ACL may forbid them
	}
	if errors.Is(err, redis.Nil) && strings.Contains(c.URL, "+sentinel://") {
		err = fmt.Errorf("%w (%w)", errUnknownMaster, err)
	}
	switch {
	case err == nil:
		return nil
	case refuses(err):
		return fmt.Errorf("store: %s refuses the configuration: %w", redactURL(c.URL), err)
	case c.Require:
		return fmt.Errorf("store: %s does not answer, and store.require (--store-require) is set: %w", redactURL(c.URL), err)
	}
	logger.Warn("store: Redis does not answer; starting anyway, deciding by on_error until it does",
		"store", redactURL(c.URL), "on_error", c.OnError, "err", err)
	return nil
}

// dialErrors is a go-redis hook that keeps the last failed dial's error.
// A Ping that runs out of time while go-redis dials again and again says
// only "context deadline exceeded"; the cause is a refused connection or
// an unknown host.
type dialErrors struct {
	mu  sync.Mutex
	err error
}

// watchDials adds a dialErrors to client's dials, and to those of every
// node of a cluster client.
func watchDials(client redis.UniversalClient) *dialErrors {
	d := &dialErrors{}
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(d) })
	} else {
		client.AddHook(d)
	}
	return d
}

func (d *dialErrors) last() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *dialErrors) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			d.mu.Lock()
			d.err = err
			d.mu.Unlock()
		}
		return conn, err
	}
}

func (d *dialErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d *dialErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// errUnknownMaster is a Sentinel URL whose master no sentinel monitors.
var errUnknownMaster = errors.New("no sentinel knows the master the URL names")

// errClusterNode is a redis:// URL that names a node of a Redis Cluster.
var errClusterNode = errors.New("it is a Redis Cluster node: use redis+cluster:// (or rediss+cluster://) with its address")

// checkDeployment reports a standalone URL that names a cluster node, which
// would answer MOVED for most keys. A server that does not let the user
// run INFO is given the benefit of the doubt.
func checkDeployment(ctx context.Context, client redis.UniversalClient) error {
	if _, ok := client.(*redis.Client); !ok {
		return nil
	}
	info, err := client.Info(ctx, "cluster").Result()
	if err != nil {
		if refuses(err) {
			return nil // INFO not permitted: not the configuration's fault
		}
		return err
	}
	if strings.Contains(info, "cluster_enabled:1") {
		return errClusterNode
	}
	return nil
}

// permanent are the prefixes of Redis's refusals that no wait cures.
var permanent = []string{
	"WRONGPASS", "NOAUTH", "NOPERM",
	"ERR DB index", "ERR invalid DB index", "ERR invalid password",
	"ERR AUTH", "ERR Client sent AUTH",
	"ERR This instance has cluster support disabled",
	"ERR SELECT is not allowed in cluster mode",
	"ERR unknown command 'sentinel'", // a Sentinel URL names a data node
}

// refuses reports whether err, or any error it joins (one per sentinel),
// is Redis answering no to the configuration. Not answering is not
// refusing: a dead or unreachable server, or one loading its data or busy,
// may answer later.
func refuses(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(e.Unwrap(), refuses)
	}
	if errors.Is(err, errClusterNode) || errors.Is(err, errUnknownMaster) {
		return true
	}
	if re, ok := err.(redis.Error); ok {
		return slices.ContainsFunc(permanent, func(p string) bool { return strings.HasPrefix(re.Error(), p) })
	}
	return refuses(errors.Unwrap(err))
}

// LogRedisTo sends go-redis's own log lines (a failed dial per connection
// attempt while Redis is down) to logger at debug level. The failsafe
// store already reports store errors, at most once per interval. The
// go-redis package has one logger per process. So this is for a program's
// main to call, once, before it opens a store; a library leaves the
// process's logging alone.
func LogRedisTo(logger *slog.Logger) { redis.SetLogger(redisLog{logger}) }

type redisLog struct{ logger *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.logger.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// closers closes each in turn: the failsafe wrapper, the store, then the
// Redis client.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// RedisClient is the Redis client under a store that Open opened, and
// false for the memory store.
func RedisClient(s ratekeeper.Store) (redis.UniversalClient, bool) {
	if fs, ok := s.(*failsafe.Store); ok {
		s = fs.Primary()
	}
	rs, ok := s.(*redisstore.Store)
	if !ok {
		return nil, false
	}
	return rs.Client(), true
}
