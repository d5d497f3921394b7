package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Open connects to the Redis deployment url names (see the package doc for
// the forms), checks that it answers, and returns a Store that owns the
// connection: Close closes it.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	client, err := NewClient(rawURL)
	if err != nil {
		return nil, err
	}
	s, err := newStore(client, true, opts)
	if err != nil {
		client.Close()
		return nil, err
	}
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redisstore: %s: %w", redact(rawURL), err)
	}
	return s, nil
}

// NewClient returns the go-redis client for rawURL without connecting: a
// *redis.Client for redis://, rediss://, unix:// and the Sentinel forms, a
// *redis.ClusterClient for the Cluster forms. The client honours context
// deadlines (ContextTimeoutEnabled) and speaks RESP2 unless the URL sets
// protocol=3.
//
// Over TLS each server is verified by the host it is dialed at: a
// sentinel, the primary and replicas at the addresses Sentinel announces,
// each cluster node at the address the cluster announces.
func NewClient(rawURL string, opts ...ClientOption) (redis.UniversalClient, error) {
	var cc clientConfig
	for _, o := range opts {
		o.applyClient(&cc)
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redisstore: %s: not a URL (redis://host:port/db)", redact(rawURL))
	}
	if cc.tls != nil && !strings.HasPrefix(scheme, "rediss") {
		return nil, fmt.Errorf("redisstore: %s: a TLS config needs a TLS URL (rediss://, rediss+sentinel://, rediss+cluster://)", redact(rawURL))
	}
	wrap := func(err error) error { return fmt.Errorf("redisstore: %s: %w", redact(rawURL), bare(err)) }
	switch scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, wrap(err)
		}
		cc.fill(&o.Protocol, &o.ContextTimeoutEnabled, &o.TLSConfig, &o.Password)
		return redis.NewClient(o), nil
	case "redis+sentinel", "rediss+sentinel":
		o, err := parseSentinel(strings.TrimSuffix(scheme, "+sentinel"), rest)
		if err != nil {
			return nil, wrap(err)
		}
		cc.fill(&o.Protocol, &o.ContextTimeoutEnabled, &o.TLSConfig, &o.Password)
		return redis.NewFailoverClient(o), nil
	case "redis+cluster", "rediss+cluster":
		o, err := parseCluster(strings.TrimSuffix(scheme, "+cluster"), rest)
		if err != nil {
			return nil, wrap(err)
		}
		cc.fill(&o.Protocol, &o.ContextTimeoutEnabled, &o.TLSConfig, &o.Password)
		return redis.NewClusterClient(o), nil
	}
	return nil, fmt.Errorf("redisstore: %s: unknown scheme %q (redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster, rediss+cluster)", redact(rawURL), scheme)
}

// ClientOption configures the client NewClient returns.
type ClientOption interface {
	applyClient(*clientConfig)
}

type clientConfig struct {
	tls      *tls.Config
	password string
}

// fill sets what every client of NewClient shares, in the fields of
// whichever go-redis options it is.
func (cc clientConfig) fill(protocol *int, ctxTimeout *bool, tlsConf **tls.Config, password *string) {
	*protocol = resp(*protocol)
	*ctxTimeout = true
	*tlsConf = cc.tlsFor(*tlsConf)
	if cc.password != "" {
		*password = cc.password
	}
}

type clientOptionFunc func(*clientConfig)

func (f clientOptionFunc) applyClient(c *clientConfig) { f(c) }

// WithTLSConfig makes the client speak TLS with cfg (its CAs, its client
// certificate) instead of the defaults of a rediss URL: the system's CAs
// and no client certificate. The URL must be one of the TLS forms
// (rediss://, rediss+sentinel://, rediss+cluster://). cfg serves every
// connection: to the sentinels and to the primary and replicas they name,
// to every node of a cluster. Leave cfg.ServerName empty to verify each
// server by the host it is dialed at; set it when every server's
// certificate holds that one name. The URL's skip_verify=true still
// applies. A nil cfg changes nothing.
func WithTLSConfig(cfg *tls.Config) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.tls = cfg })
}

// WithPassword sets the password of the Redis servers, in place of one in
// the URL. It serves the primary and replicas and every cluster node, not
// the sentinels (the URL's sentinel_password sets theirs). A password read
// from a file or the environment then stays out of URLs, which end up in
// command lines and logs. An empty p changes nothing.
func WithPassword(p string) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.password = p })
}

// tlsFor returns the TLS config for a client whose URL gave fromURL (nil
// for a clear-text URL): the configured one if any. It never returns one
// that names a server. go-redis's default, the first address's host, would
// make every other server answer to that host's name. A dial with no name
// verifies the dialed host's.
func (c clientConfig) tlsFor(fromURL *tls.Config) *tls.Config {
	if fromURL == nil {
		return nil
	}
	cfg := c.tls
	if cfg == nil {
		cfg = fromURL.Clone()
		cfg.ServerName = ""
	}
	if fromURL.InsecureSkipVerify && !cfg.InsecureSkipVerify {
		cfg = cfg.Clone()
		cfg.InsecureSkipVerify = true
	}
	return cfg
}

// resp picks RESP2 unless the URL asked for a protocol. The store needs
// none of RESP3's push messages. go-redis reads pending pushes before each
// command without a deadline, which would hold a call on a hung server past
// its context.
func resp(p int) int {
	if p == 0 {
		return 2
	}
	return p
}

// bare strips the URL (and so any password) that url.Parse puts in its
// errors.
func bare(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// splitHosts takes "user:pass@h1:p1,h2:p2/path?query" apart.
func splitHosts(rest string) (userinfo string, hosts []string, path, query string, err error) {
	rest, query, _ = strings.Cut(rest, "?")
	hostpart, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(hostpart, '@'); i >= 0 {
		userinfo, hostpart = hostpart[:i+1], hostpart[i+1:]
	}
	for h := range strings.SplitSeq(hostpart, ",") {
		if h == "" {
			return "", nil, "", "", fmt.Errorf("empty address in %q", hostpart)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return "", nil, "", "", fmt.Errorf("no address")
	}
	return userinfo, hosts, path, query, nil
}

// parseCluster reads "[user:pass@]h1:p1,h2:p2[?options]" by handing
// go-redis its own form, redis://h1:p1?addr=h2:p2&options.
func parseCluster(scheme, rest string) (*redis.ClusterOptions, error) {
	userinfo, hosts, path, query, err := splitHosts(rest)
	if err != nil {
		return nil, err
	}
	if path != "" {
		return nil, fmt.Errorf("a cluster has no databases: remove /%s", path)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u := scheme + "://" + userinfo + hosts[0] + "?" + q.Encode()
	return redis.ParseClusterURL(u)
}

// parseSentinel reads "[user:pass@]h1:p1,h2:p2/master[/db][?options]".
// go-redis's own form puts the sentinel's credentials in the userinfo; here
// they are the data nodes', and sentinel_username and sentinel_password
// carry Sentinel's.
func parseSentinel(scheme, rest string) (*redis.FailoverOptions, error) {
	userinfo, hosts, path, query, err := splitHosts(rest)
	if err != nil {
		return nil, err
	}
	master, db, _ := strings.Cut(path, "/")
	if master == "" {
		return nil, fmt.Errorf("the master name is missing (redis+sentinel://host:26379,host2:26379/mymaster)")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, err
	}
	sentUser, sentPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	q.Set("master_name", master)
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u := scheme + "://" + hosts[0]
	if db != "" {
		u += "/" + db
	}
	o, err := redis.ParseFailoverURL(u + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	o.SentinelUsername, o.SentinelPassword = sentUser, sentPass
	if userinfo != "" {
		ui, err := url.Parse("redis://" + userinfo + "x")
		if err != nil {
			return nil, err
		}
		o.Username = ui.User.Username()
		o.Password, _ = ui.User.Password()
	}
	return o, nil
}

// redact hides the password in a URL for messages.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "(not a URL)"
	}
	rest, _, hasQuery := strings.Cut(rest, "?")
	hostpart, tail, hasTail := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(hostpart, '@'); i >= 0 {
		user, _, hasPass := strings.Cut(hostpart[:i], ":")
		if hasPass {
			hostpart = user + ":xxxxx" + hostpart[i:]
		}
	}
	if hasTail {
		hostpart += "/" + tail
	}
	if hasQuery {
		hostpart += "?..." // options may hold sentinel_password
	}
	return scheme + "://" + hostpart
}
