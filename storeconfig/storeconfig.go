package storeconfig

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/yamlconf"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// Defaults for the fields of Config left zero.
const (
	DefaultURL       = "memory://"
	DefaultTimeout   = 50 * time.Millisecond
	DefaultOnError   = "allow"
	DefaultInstances = 1
	DefaultMode      = "exact"
	// DefaultSyncPeriod is how often sync and lease modes talk to Redis.
	DefaultSyncPeriod = 100 * time.Millisecond
)

// Config describes the store: yaml `store: {url, timeout, on_error,
// instances, mode, sync_period, tls, password_file, max_keys}`. The zero
// Config is the memory store; max_keys only matters for it, the other
// fields only for Redis.
type Config struct {
	// URL is "memory://" (the default) or a Redis URL: redis://, rediss://,
	// or the Sentinel and Cluster forms redisstore.Open accepts.
	URL string `yaml:"url"`
	// Timeout bounds each call to Redis (default 50ms); past it, OnError
	// decides.
	Timeout time.Duration `yaml:"timeout"`
	// OnError is what happens when Redis fails or times out: "allow" (fail
	// open, the default), "deny" (fail closed) or "local" (fall back to a
	// local in-memory limit, divided by Instances).
	OnError string `yaml:"on_error"`
	// Instances is how many processes share the Redis store, so that the
	// "local" fallback gives each of them its share of a limit. Default 1.
	Instances int `yaml:"instances"`
	// Mode is how the shared limits are decided. "exact", the default,
	// makes every decision in Redis. "sync" decides locally and sends the
	// counts every SyncPeriod: over the limit by a bounded amount. "lease"
	// decides locally, from quota leased from Redis: never over the limit.
	// docs/redis.md says when to choose which.
	Mode string `yaml:"mode"`
	// SyncPeriod is how often sync and lease modes talk to Redis (default
	// 100ms): shorter is closer to exact, longer costs Redis less.
	SyncPeriod time.Duration `yaml:"sync_period"`
	// TLS is how the TLS URLs (rediss://, rediss+sentinel://,
	// rediss+cluster://) speak TLS: yaml `{ca_file, cert_file, key_file,
	// server_name, insecure_skip_verify}`. Its ca_file is the CAs the servers'
	// certificates must chain to (default: the system's). Its cert_file
	// and key_file are a client certificate, for servers that require one.
	// Its server_name is the name every server's certificate must hold
	// (default: the host each is dialed at). It serves every connection: to
	// the sentinels and the primary and replicas they name, to every
	// cluster node. Set with another scheme, it is an error. Relative paths are
	// relative to the working directory until Resolve.
	TLS tlsconfig.Client `yaml:"tls"`
	// PasswordFile is a file that holds Redis's password; a trailing
	// newline is not part of it. The password is then needed neither in
	// the URL nor on a command line: a Kubernetes Secret mounted as a
	// file, a systemd credential. Relative to the working directory until Resolve.
	PasswordFile string `yaml:"password_file"`
	// Password is Redis's password given by the program (the commands read
	// it from the RATEKEEPER_STORE_PASSWORD environment variable); never
	// read from a file's yaml. A URL that holds a password as well is an
	// error, and so is a Password with a PasswordFile.
	Password string `yaml:"-"`
	// MaxKeys caps the keys the memory store holds (default
	// memstore.DefaultMaxKeys): past it a new key evicts an idle one, or
	// the one closest to idle, whose count is forgotten (see memstore).
	MaxKeys int `yaml:"max_keys"`
	// Require refuses to start while Redis does not answer, instead of
	// deciding by OnError until it does.
	Require bool `yaml:"require"`
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.OnError == "" {
		c.OnError = DefaultOnError
	}
	if c.Instances == 0 {
		c.Instances = DefaultInstances
	}
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	if c.SyncPeriod == 0 {
		c.SyncPeriod = DefaultSyncPeriod
	}
	return c
}

// Resolve returns c with the relative paths of its TLS files made
// relative to dir, the directory of the config file that named them.
func (c Config) Resolve(dir string) Config {
	c.TLS = c.TLS.Resolve(dir)
	if c.PasswordFile != "" && !filepath.IsAbs(c.PasswordFile) {
		c.PasswordFile = filepath.Join(dir, c.PasswordFile)
	}
	return c
}

// IsMemory reports whether c names the embedded memory store.
func (c Config) IsMemory() bool {
	return c.URL == "" || strings.HasPrefix(c.URL, "memory:")
}

// Validate reports what is wrong with c, naming the field, or nil.
func (c Config) Validate() error {
	c = c.WithDefaults()
	u, err := c.parseURL()
	if err == nil {
		err = c.checkTLS(u.Scheme)
	}
	if err == nil {
		err = c.checkSettings(u.Scheme)
	}
	if err == nil {
		err = c.checkPassword(u)
	}
	return err
}

// parseURL parses c.URL and checks it as the store will read it.
func (c Config) parseURL() (*url.URL, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		// Not url.Parse's error itself, which quotes the URL whole,
		// password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("url: %w", err)
	}
	switch u.Scheme {
	case "memory":
		return u, nil
	case "redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster", "unix":
	default:
		return nil, fmt.Errorf("url: unknown scheme %q in %q (memory://, redis://, rediss://, redis+sentinel://, redis+cluster://)", u.Scheme, redactURL(c.URL))
	}
	if err := parseRedisURL(c.URL); err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	return u, nil
}

// checkTLS refuses a tls section with a scheme that is not TLS, or with
// a problem of its own.
func (c Config) checkTLS(scheme string) error {
	if c.TLS.IsZero() {
		return nil
	}
	if !isTLS(scheme) {
		return fmt.Errorf("tls: is set, but %s:// is not TLS: use rediss:// (or rediss+sentinel://, rediss+cluster://)", scheme)
	}
	if ps := c.TLS.Problems(); len(ps) > 0 {
		return tlsError(ps[0])
	}
	return nil
}

// checkSettings checks the fields that are a number or a word, and those
// that apply to one kind of store only.
func (c Config) checkSettings(scheme string) error {
	if c.Timeout < 0 {
		return fmt.Errorf("timeout: must not be negative, not %v", c.Timeout)
	}
	switch c.OnError {
	case "allow", "deny", "local":
	default:
		return fmt.Errorf("on_error: %q is not allow, deny or local", c.OnError)
	}
	if c.Instances < 0 {
		return fmt.Errorf("instances: must be positive, not %d", c.Instances)
	}
	switch c.Mode {
	case "exact", "sync", "lease":
	default:
		return fmt.Errorf("mode: %q is not exact, sync or lease", c.Mode)
	}
	if c.SyncPeriod < time.Millisecond || c.SyncPeriod > time.Minute {
		return fmt.Errorf("sync_period: %v is outside 1ms to 1m", c.SyncPeriod)
	}
	if c.MaxKeys < 0 {
		return fmt.Errorf("max_keys: must not be negative, not %d", c.MaxKeys)
	}
	if c.MaxKeys > 0 && scheme != "memory" {
		return fmt.Errorf("max_keys: caps the memory store's keys, but the store is %s:// (Redis's own maxmemory bounds it)", scheme)
	}
	if c.Require && scheme == "memory" {
		return fmt.Errorf("require: waits for Redis at start, but the store is memory://")
	}
	return nil
}

// checkPassword refuses a password for the memory store, a password given
// twice, and a password file that cannot be read.
func (c Config) checkPassword(u *url.URL) error {
	if c.Password == "" && c.PasswordFile == "" {
		return nil
	}
	if u.Scheme == "memory" {
		return fmt.Errorf("password_file: the memory store has no password, but password_file or RATEKEEPER_STORE_PASSWORD gives one")
	}
	if c.Password != "" && c.PasswordFile != "" {
		return fmt.Errorf("password_file: the password is given twice, by password_file and by RATEKEEPER_STORE_PASSWORD")
	}
	if _, has := u.User.Password(); has {
		return fmt.Errorf("password_file: the password is given twice, in the URL and by password_file or RATEKEEPER_STORE_PASSWORD")
	}
	if c.PasswordFile != "" {
		if _, err := readPassword(c.PasswordFile); err != nil {
			return fmt.Errorf("password_file: %w", err)
		}
	}
	return nil
}

// parseRedisURL reports what NewClient, which reads the URL as the server
// will, finds wrong in it (an unknown option, a database that is not a
// number, a cluster with one), without dialling.
func parseRedisURL(raw string) error {
	client, err := redisstore.NewClient(raw)
	if err != nil {
		return err
	}
	return client.Close()
}

// readPassword reads a password file: its content without one trailing
// newline (CRLF or LF). An empty password is an error.
func readPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	p := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if p == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return p, nil
}

// isTLS reports whether a URL scheme is one of Redis's over TLS.
func isTLS(scheme string) bool { return strings.HasPrefix(scheme, "rediss") }

// tlsError names a TLS problem's field under tls: "tls.ca_file: ...".
func tlsError(err error) error {
	var fe *tlsconfig.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("tls.%s: %w", fe.Field, fe.Err)
	}
	return fmt.Errorf("tls: %w", err)
}

// Redacted is c's URL with any password hidden, for messages.
func (c Config) Redacted() string { return redactURL(c.URL) }

// redactURL hides a password in u for messages: the userinfo's, and the
// value of any query option whose name holds "password" (redisstore reads
// sentinel_password there), which url.URL.Redacted leaves as it is.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, p := range parts {
			k, _, _ := strings.Cut(p, "=")
			if name, err := url.QueryUnescape(k); err != nil || strings.Contains(strings.ToLower(name), "password") {
				parts[i] = k + "=xxxxx"
			}
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	return u.Redacted()
}

// String renders c for logs, with any password hidden.
func (c Config) String() string {
	c = c.WithDefaults()
	if c.IsMemory() {
		if c.MaxKeys > 0 {
			return fmt.Sprintf("memory:// (at most %d keys)", c.MaxKeys)
		}
		return "memory://"
	}
	mode := c.Mode
	if mode != "exact" {
		mode += " every " + c.SyncPeriod.String()
	}
	s := fmt.Sprintf("%s (timeout %v, on_error %s, instances %d, mode %s", redactURL(c.URL), c.Timeout, c.OnError, c.Instances, mode)
	if c.Require {
		s += ", required at start"
	}
	switch {
	case c.PasswordFile != "":
		s += ", password from " + c.PasswordFile
	case c.Password != "":
		s += ", password from RATEKEEPER_STORE_PASSWORD"
	}
	if u, err := url.Parse(c.URL); err == nil && isTLS(u.Scheme) {
		s += ", " + tlsString(c.TLS)
	}
	return s + ")"
}

// tlsString says how the store speaks TLS: the files it reads and the
// name it verifies, none of which is a secret.
func tlsString(t tlsconfig.Client) string {
	var parts []string
	if t.CAFile != "" {
		parts = append(parts, "ca_file "+t.CAFile)
	} else {
		parts = append(parts, "the system's CAs")
	}
	if t.CertFile != "" {
		parts = append(parts, "client certificate "+t.CertFile)
	}
	if t.ServerName != "" {
		parts = append(parts, "server_name "+t.ServerName)
	}
	if t.InsecureSkipVerify {
		parts = append(parts, "insecure_skip_verify: any server certificate accepted")
	}
	return "TLS: " + strings.Join(parts, ", ")
}

// Open builds the store c describes. The Closer releases it (the memory
// store's janitor, Redis connections); call it after the last decision. A
// Redis that refuses the configuration (a database, password or user it
// does not have; the wrong deployment kind) is an error. One that does not
// answer yet is logged, and decisions follow on_error until it answers,
// unless c.Require makes it an error.
func Open(ctx context.Context, c Config, logger *slog.Logger) (ratekeeper.Store, io.Closer, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	c = c.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if c.IsMemory() {
		var opts []memstore.Option
		if c.MaxKeys > 0 {
			opts = append(opts, memstore.WithMaxKeys(c.MaxKeys))
		}
		s := memstore.New(opts...)
		return s, s, nil
	}
	return openRedis(ctx, c, logger)
}

// SetLimitModes gives the limits in modes a mode of their own ("exact",
// "sync" or "lease") on a Redis store that Open opened. On the memory
// store, where every decision is local and exact, it does nothing.
func SetLimitModes(s ratekeeper.Store, modes map[ratekeeper.Limit]string) error {
	if fs, ok := s.(*failsafe.Store); ok {
		s = fs.Primary()
	}
	rs, ok := s.(*redisstore.Store)
	if !ok || len(modes) == 0 {
		return nil
	}
	m := make(map[ratekeeper.Limit]redisstore.Mode, len(modes))
	for l, mode := range modes {
		m[l] = redisstore.Mode(mode)
	}
	return rs.SetLimitModes(m)
}

// RegisterFlags defines the shared store flags on fs, writing into c:
// --store, --store-timeout, --store-on-error, --store-instances,
// --store-mode, --store-sync-period, --store-password-file,
// --store-max-keys, --store-require, and for TLS --store-tls-ca-file,
// --store-tls-cert-file, --store-tls-key-file, --store-tls-server-name.
// Values already in c are the flags' defaults.
func RegisterFlags(fs *flag.FlagSet, c *Config) {
	d := c.WithDefaults()
	*c = d
	registerFlags(fs, c, d, func(field, def string) string {
		// The flag package shows the defaults that are not zero values.
		switch field {
		case "tls.ca_file", "tls.server_name", "max_keys", "require":
			return " (default: " + def + ")"
		}
		return ""
	})
}

// RegisterOverrideFlags defines the same flags as RegisterFlags for a
// command whose config file has a store section. Each flag overrides its
// field, so the flags have no defaults of their own. Their help names the
// field and its default, not a default that the file would silently
// override.
func RegisterOverrideFlags(fs *flag.FlagSet, c *Config) {
	d := Config{}.WithDefaults()
	*c = Config{}
	registerFlags(fs, c, d, func(field, def string) string {
		if def == "" {
			return " (default: the file's store." + field + ")"
		}
		return " (default: the file's store." + field + ", else " + def + ")"
	})
}

// registerFlags defines the store flags into c, whose values are the
// flags' defaults (zero for RegisterOverrideFlags); what(field, def) is
// the help's note on the default of a field whose own default is def.
func registerFlags(fs *flag.FlagSet, c *Config, d Config, what func(field, def string) string) {
	num := func(n int) string { return fmt.Sprint(n) }
	fs.StringVar(&c.URL, "store", c.URL, "store `URL`: memory:// or redis://[user@]host:port/db (rediss://, redis+sentinel://, redis+cluster://); the password from --store-password-file or RATEKEEPER_STORE_PASSWORD"+what("url", d.URL))
	fs.DurationVar(&c.Timeout, "store-timeout", c.Timeout, "bound on each store call; past it --store-on-error decides"+what("timeout", d.Timeout.String()))
	fs.StringVar(&c.OnError, "store-on-error", c.OnError, "when the store fails: allow, deny or local"+what("on_error", d.OnError))
	fs.IntVar(&c.Instances, "store-instances", c.Instances, "processes sharing the store (the local fallback gives each 1/N of a limit)"+what("instances", num(d.Instances)))
	fs.StringVar(&c.Mode, "store-mode", c.Mode, "how shared limits are decided: exact (each in Redis), sync (locally, counts synced; bounded over-admission) or lease (locally, from leased quota; never over)"+what("mode", d.Mode))
	fs.DurationVar(&c.SyncPeriod, "store-sync-period", c.SyncPeriod, "how often sync and lease modes talk to Redis"+what("sync_period", d.SyncPeriod.String()))
	fs.StringVar(&c.PasswordFile, "store-password-file", c.PasswordFile, "`file` holding Redis's password (one trailing newline ignored), instead of the URL"+what("password_file", ""))
	fs.IntVar(&c.MaxKeys, "store-max-keys", c.MaxKeys, "the most keys the memory store holds; past it a new key evicts an idle one"+what("max_keys", num(memstore.DefaultMaxKeys)))
	fs.BoolVar(&c.Require, "store-require", c.Require, "refuse to start while Redis does not answer, instead of deciding by --store-on-error until it does"+what("require", "false"))
	fs.StringVar(&c.TLS.CAFile, "store-tls-ca-file", c.TLS.CAFile, "PEM `file` of the CAs Redis's certificates must chain to, for rediss:// URLs"+what("tls.ca_file", "the system's CAs"))
	fs.StringVar(&c.TLS.CertFile, "store-tls-cert-file", c.TLS.CertFile, "PEM client certificate `file` for a Redis that requires one (with --store-tls-key-file); reread when it changes"+what("tls.cert_file", ""))
	fs.StringVar(&c.TLS.KeyFile, "store-tls-key-file", c.TLS.KeyFile, "PEM private key `file` of --store-tls-cert-file"+what("tls.key_file", ""))
	fs.StringVar(&c.TLS.ServerName, "store-tls-server-name", c.TLS.ServerName, "the `name` every Redis server's certificate must hold"+what("tls.server_name", "the host each is dialed at"))
}

// configFields is Config without its decoder.
type configFields Config

// UnmarshalYAML reads the store as a mapping, or as its URL alone:
// `store: redis://host:6379/0` is `store: {url: redis://host:6379/0}`.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*c = Config{URL: n.Value}
		return nil
	case yaml.MappingNode:
		if err := yamlconf.KnownKeys(n, reflect.TypeFor[configFields]()); err != nil {
			return err
		}
		return n.Decode((*configFields)(c))
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected the store's URL (store: redis://host:6379/0) or a mapping (store: {url: redis://host:6379/0, timeout: 50ms}), not a list", n.Line)}}
}
