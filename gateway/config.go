package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ratekeeper/ratekeeper/internal/server/adminauth"
	"github.com/ratekeeper/ratekeeper/internal/yamlconf"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storeconfig"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// Config is the gateway's file (ratekeeper proxy --config): the fields
// of a rules file (rules.Config: client_ip, access, headers, rules) and the
// gateway's own beside them.
type Config struct {
	// Listen is the gateway's address, default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// AdminListen serves /metrics, /healthz and /readyz; empty: none.
	AdminListen string `yaml:"admin_listen"`
	// Upstream is the URL of the API behind the gateway, or "builtin:demo"
	// for the small demo API built into the binary.
	Upstream string `yaml:"upstream"`
	// UpstreamTransport is how the gateway sends HTTP/1.1 requests to the
	// upstream (http:// or https://). "direct" (default) sends them on the
	// request's own goroutine over its own pool of keep-alive connections.
	// "standard" sends every request through Go's http.Transport. HTTP/2 to
	// the upstream (upstream_protocol: h2), upgrades and "Expect:
	// 100-continue" always take http.Transport.
	UpstreamTransport string `yaml:"upstream_transport"`
	// ClientTransport is how the gateway reads requests from clients:
	// "fast" (default) serves plain HTTP/1.1 requests on its own fast path
	// and hands every other connection to Go's net/http server, "standard"
	// gives every connection to net/http. The fast path needs the direct
	// upstream transport; with "standard" there, or upstream_protocol: h2,
	// or the demo, every connection goes to net/http.
	ClientTransport string `yaml:"client_transport"`
	// ClientH2 is the server of HTTP/2 client connections on the fast
	// path: "standard" (default) is Go's net/http, "frames" the gateway's
	// own (gateway/internal/h2), which relays plain requests without a
	// goroutine per stream and gives the rest to net/http's handler.
	ClientH2 string `yaml:"client_h2"`
	// AccessLog is the access log: "off" (the default), "all" (a line per
	// request) or "refused" (a line per request refused: 429, 503 by the
	// store's failure policy, 403 by the deny list). Lines are JSON, one
	// per request, on standard output (the server's own logs go to
	// standard error): time, client, method, path (without the query),
	// status, rules (those that matched), refused_by, duration in seconds.
	// Requests are served by net/http while it is on: the fast path does
	// not log. It costs what client_transport: standard does (rk-std in
	// docs/benchmarks.md). A reload applies from the next request.
	AccessLog string `yaml:"access_log"`
	// ShutdownTimeout bounds how long a graceful shutdown waits for
	// in-flight requests, default 30s.
	ShutdownTimeout rules.Duration `yaml:"shutdown_timeout"`
	// Watch is how often the gateway looks for a changed file (0: the
	// default 2s; negative: never, SIGHUP only).
	Watch rules.Duration `yaml:"watch"`
	// Paths says how the gateway treats request paths.
	Paths PathsConfig `yaml:"paths"`
	// Client bounds the gateway's client connections.
	Client ClientConfig `yaml:"client"`
	// UpstreamTimeouts bounds the gateway's work with the upstream.
	UpstreamTimeouts UpstreamTimeoutsConfig `yaml:"upstream_timeouts"`
	// Store selects the store: memory:// by default.
	Store storeconfig.Config `yaml:"store"`
	// TLS terminates TLS on the listener: one or more certificates (chosen
	// by SNI), a minimum version and optionally mutual TLS. The listener
	// then offers HTTP/2 and HTTP/1.1 by ALPN. Certificates follow their
	// files (a renewal is served from the next handshake); relative paths
	// are taken from the file's directory. Default: none, clear text.
	TLS tlsconfig.Server `yaml:"tls"`
	// H2C serves HTTP/2 without TLS on a clear-text listener to clients
	// that begin with its preface (prior knowledge); HTTP/1.1 as before.
	// The Upgrade form of h2c is never served. Default false.
	H2C bool `yaml:"h2c"`
	// UpstreamProtocol is the protocol spoken to the upstream. "auto" (the
	// default) and "http1" speak HTTP/1.1, to http:// and https:// alike,
	// over the gateway's own transport. It measured cheaper than HTTP/2 to
	// the upstream (docs/benchmarks.md). "h2" speaks HTTP/2 only (prior
	// knowledge to http://, h2 by ALPN to https://), which gRPC services
	// need.
	UpstreamProtocol string `yaml:"upstream_protocol"`
	// UpstreamTLS is how the gateway verifies an https:// upstream (a
	// private CA, the name to expect) and the client certificate it shows.
	UpstreamTLS tlsconfig.Client `yaml:"upstream_tls"`

	// Admin says what the admin listener (admin_listen) lets an operator
	// do beyond /metrics, /healthz and /readyz. Listing the rules and
	// peeking at a client's state are always served. Resetting a client's
	// counter needs admin.reset and a bearer token (docs/gateway.md).
	Admin AdminConfig `yaml:"admin"`

	rules.Config `yaml:",inline"`

	// dir is the file's directory, from which relative paths are taken.
	dir string
	// file is the file's name, for errors found after Parse.
	file string
	// adminToken is the token admin.token_file or admin.token_env hold,
	// read when the file is.
	adminToken string
}

// AdminConfig turns on the admin listener's write, and the token that
// guards it. The token is read from a file or an environment variable,
// never from this file, when the file is read (at start and on each
// reload).
type AdminConfig struct {
	// Reset serves POST /v1/rules/{rule}/reset, which forgets one client's
	// counter for a rule. Default false: the endpoint answers 404. It needs
	// a token.
	Reset bool `yaml:"reset"`
	// ProtectReads asks for the token on the reads too (GET /v1/rules and
	// /v1/rules/{rule}/state), which are otherwise open to whoever reaches
	// the admin listener (a private address by design). Default false.
	ProtectReads bool `yaml:"protect_reads"`
	// TokenFile is a file that holds the bearer token (a trailing newline
	// is not part of it; at least 16 characters, no white space), relative
	// to this file's directory.
	TokenFile string `yaml:"token_file"`
	// TokenEnv names the environment variable that holds the token, in
	// place of TokenFile.
	TokenEnv string `yaml:"token_env"`
}

// Upstream protocols.
const (
	ProtocolAuto  = "auto"
	ProtocolHTTP1 = "http1"
	ProtocolH2    = "h2"
)

// PathsConfig says how the gateway treats request paths (read at start).
// The gateway forwards the normalized path that the rules saw (see
// NormalizePath) and refuses ambiguous ones with 400.
type PathsConfig struct {
	// AllowEncodedSlash forwards an encoded slash or backslash (%2F, %5C)
	// encoded, for APIs whose identifiers hold one, instead of refusing
	// the request; rules match it as a slash. Default false.
	AllowEncodedSlash bool `yaml:"allow_encoded_slash"`
}

// ClientConfig bounds the gateway's client connections, on every client
// path alike (read at start). Zero durations take the defaults.
type ClientConfig struct {
	// ReadHeaderTimeout is how long a request head (and on the fast path
	// its small body) may take to arrive, from the connection's start or
	// the end of the previous request. Default 10s.
	ReadHeaderTimeout rules.Duration `yaml:"read_header_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request. Default 60s.
	IdleTimeout rules.Duration `yaml:"idle_timeout"`
	// BodyTimeout is the longest pause while a request body is read.
	// Default 30s.
	BodyTimeout rules.Duration `yaml:"body_timeout"`
	// GRPCIdleTimeout ends a gRPC call streaming to an h2 upstream when
	// its client rests between messages and nothing has flowed either
	// way for this long. Default 5m.
	GRPCIdleTimeout rules.Duration `yaml:"grpc_idle_timeout"`
	// WriteTimeout is the longest a write of the answer to the client may
	// stall: a client that stops reading frees its upstream connection
	// after it. Default 60s.
	WriteTimeout rules.Duration `yaml:"write_timeout"`
	// BodyBuffer is the size in bytes up to which a request body is read
	// whole before the upstream is asked, so that a slow client holds no
	// upstream connection. Default 65536; -1 streams every body.
	BodyBuffer int `yaml:"body_buffer"`
	// MaxConnsPerIP caps the connections one client address (masked by
	// client_ip's prefixes) may hold open; trusted proxies are exempt.
	// Default 1024; -1 turns the cap off.
	MaxConnsPerIP int `yaml:"max_conns_per_ip"`
}

// UpstreamTimeoutsConfig bounds the gateway's work with the upstream (read
// at start). Zero takes the default.
type UpstreamTimeoutsConfig struct {
	// Dial bounds opening a connection to the upstream. Default 10s.
	Dial rules.Duration `yaml:"dial"`
	// ResponseHeader bounds the wait for the upstream's response head
	// once the request is sent. Default 60s.
	ResponseHeader rules.Duration `yaml:"response_header"`
	// Idle is how long an unused keep-alive connection to the upstream is
	// kept. Default 60s.
	Idle rules.Duration `yaml:"idle"`
}

// LoadFile reads, decodes and validates the gateway's file at path. Every
// problem found is reported (joined), each as a *rules.Error naming the
// file, the line and the field.
func LoadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse decodes and validates a gateway file; name only labels errors.
func Parse(name string, data []byte) (*Config, error) {
	c := Config{dir: filepath.Dir(name), file: name}
	if _, err := yamlconf.Decode(name, data, &c, c.problems); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate reports every problem in c (without lines: use Parse for
// those).
func (c *Config) Validate() error {
	var out []error
	for _, e := range c.problems() {
		out = append(out, e)
	}
	return errors.Join(out...)
}

// serverTLS and upstreamTLS are the TLS sections with their paths taken
// from the file's directory.
func (c *Config) serverTLS() tlsconfig.Server   { return c.TLS.Resolve(c.dir) }
func (c *Config) upstreamTLS() tlsconfig.Client { return c.UpstreamTLS.Resolve(c.dir) }

// problems lists what is wrong with the gateway's fields, then with the
// rules, each by the path of its field. It also reads the admin token.
func (c *Config) problems() []*rules.Error {
	var errs []*rules.Error
	fail := func(field string, format string, args ...any) {
		errs = append(errs, &rules.Error{Field: field, Err: fmt.Errorf(format, args...)})
	}
	c.upstreamProblems(fail)
	c.choiceProblems(fail)
	c.addressProblems(fail)
	c.boundProblems(fail)
	if err := c.Store.Resolve(c.dir).Validate(); err != nil {
		fail("store", "%v", err)
	}
	c.tlsProblems(fail)
	c.adminToken = c.loadAdminToken(fail)
	return append(errs, c.Config.Problems()...)
}

// failFunc reports a problem with the field at its path.
type failFunc = func(field string, format string, args ...any)

func (c *Config) upstreamProblems(fail failFunc) {
	if c.Upstream == "" || c.Upstream == "builtin:demo" {
		return
	}
	u, err := url.Parse(c.Upstream)
	switch {
	case !strings.Contains(c.Upstream, "://"):
		fail("upstream", "has no scheme: add http:// (upstream: %s) or https://", redactedURL("http://"+c.Upstream))
	case err != nil:
		// url.Error quotes the whole URL, a password in it too.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		fail("upstream", "not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		fail("upstream", "%q: use http://host:port, https://host:port or builtin:demo", u.Redacted())
	case u.Host == "":
		fail("upstream", "%q has no host", u.Redacted())
	}
}

// choiceProblems checks the fields that take one of a few words.
func (c *Config) choiceProblems(fail failFunc) {
	for _, f := range []struct {
		field, value, use string
		valid             []string
	}{
		{"upstream_transport", c.UpstreamTransport, "direct or standard", []string{"", "direct", "standard"}},
		{"client_transport", c.ClientTransport, "fast or standard", []string{"", "fast", "standard"}},
		{"client_h2", c.ClientH2, "standard or frames", []string{"", "standard", "frames"}},
		{"upstream_protocol", c.UpstreamProtocol, "auto, http1 or h2", []string{"", ProtocolAuto, ProtocolHTTP1, ProtocolH2}},
		{"access_log", c.AccessLog, "off, all or refused", []string{"", AccessLogOff, AccessLogAll, AccessLogRefused}},
	} {
		if !slices.Contains(f.valid, f.value) {
			fail(f.field, "%q: use %s", f.value, f.use)
		}
	}
}

// addressProblems checks that the listeners' addresses are host:port.
func (c *Config) addressProblems(fail failFunc) {
	for _, f := range []struct{ name, addr string }{{"listen", c.Listen}, {"admin_listen", c.AdminListen}} {
		if f.addr != "" {
			if _, _, err := net.SplitHostPort(f.addr); err != nil {
				fail(f.name, "%q is not host:port: %v", f.addr, err)
			}
		}
	}
}

// boundProblems checks the timeouts and sizes: no negative duration, and
// no size below -1 (which turns the bound off).
func (c *Config) boundProblems(fail failFunc) {
	for _, d := range []struct {
		field string
		d     rules.Duration
	}{
		{"shutdown_timeout", c.ShutdownTimeout},
		{"client.read_header_timeout", c.Client.ReadHeaderTimeout},
		{"client.idle_timeout", c.Client.IdleTimeout},
		{"client.body_timeout", c.Client.BodyTimeout},
		{"client.grpc_idle_timeout", c.Client.GRPCIdleTimeout},
		{"client.write_timeout", c.Client.WriteTimeout},
		{"upstream_timeouts.dial", c.UpstreamTimeouts.Dial},
		{"upstream_timeouts.response_header", c.UpstreamTimeouts.ResponseHeader},
		{"upstream_timeouts.idle", c.UpstreamTimeouts.Idle},
	} {
		if d.d < 0 {
			fail(d.field, "must not be negative")
		}
	}
	if c.Client.BodyBuffer < -1 {
		fail("client.body_buffer", "%d: use a size in bytes, 0 for the default or -1 to stream every body", c.Client.BodyBuffer)
	}
	if c.Client.MaxConnsPerIP < -1 {
		fail("client.max_conns_per_ip", "%d: use a count, 0 for the default or -1 for no cap", c.Client.MaxConnsPerIP)
	}
}

// tlsProblems checks the listener's and the upstream's TLS sections.
func (c *Config) tlsProblems(fail failFunc) {
	for _, e := range c.serverTLS().Problems() {
		fail("tls."+e.Field, "%v", e.Err)
	}
	if c.TLS.Enabled() && c.H2C {
		fail("h2c", "is for a clear-text listener: over tls, HTTP/2 is offered by ALPN")
	}
	if c.UpstreamTLS.IsZero() {
		return
	}
	if !strings.HasPrefix(c.Upstream, "https:") && !slices.ContainsFunc(c.Rules, func(r rules.RuleConfig) bool { return strings.HasPrefix(r.OverLimit.Upstream, "https:") }) {
		fail("upstream_tls", "is set but the upstream %q is not https://, nor is an over_limit's", c.Upstream)
		return
	}
	for _, e := range c.upstreamTLS().Problems() {
		fail("upstream_tls."+e.Field, "%v", e.Err)
	}
}

// loadAdminToken reads the admin token from admin.token_file or
// admin.token_env. It fails when the token is given twice, or when a
// setting that needs it has none. It returns "" when there is no token.
func (c *Config) loadAdminToken(fail failFunc) string {
	switch a := c.Admin; {
	case a.TokenFile != "" && a.TokenEnv != "":
		fail("admin.token_env", "the token is given twice, by admin.token_file and admin.token_env: keep one")
	case a.TokenFile != "" || a.TokenEnv != "":
		field, file := "admin.token_env", ""
		if a.TokenFile != "" {
			field, file = "admin.token_file", a.TokenFile
			if !filepath.IsAbs(file) {
				file = filepath.Join(c.dir, file)
			}
		}
		tok, err := adminauth.Load(file, a.TokenEnv)
		if err != nil {
			fail(field, "%v", err)
		}
		return tok
	case a.Reset:
		fail("admin.reset", "needs a bearer token: set admin.token_file (or admin.token_env) to where the token is, never the token itself")
	case a.ProtectReads:
		fail("admin.protect_reads", "needs a bearer token: set admin.token_file (or admin.token_env)")
	}
	return ""
}
