package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper/internal/configerr"
	"github.com/ratekeeper/ratekeeper/internal/storeconfig"
)

// Config is a whole configuration file as written. Listen, AdminListen,
// Upstream, UpstreamTransport, ClientTransport, ShutdownTimeout and Watch
// are read by the gateway (ratekeeper proxy) only; the middleware ignores
// them.
type Config struct {
	// Listen is the gateway's address, default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// AdminListen serves /metrics, /healthz and /readyz; empty: none.
	AdminListen string `yaml:"admin_listen"`
	// Upstream is the URL of the API behind the gateway, or "builtin:demo"
	// for the small demo API built into the binary.
	Upstream string `yaml:"upstream"`
	// UpstreamTransport is how the gateway sends requests to a plain-HTTP
	// upstream: "direct" (default) on the request's own goroutine over its
	// own pool of keep-alive connections, or "standard" through Go's
	// http.Transport for every request. HTTPS upstreams, upgrades and
	// "Expect: 100-continue" always take http.Transport.
	UpstreamTransport string `yaml:"upstream_transport"`
	// ClientTransport is how the gateway reads requests from clients:
	// "fast" (default) serves plain HTTP/1.1 requests on its own fast path
	// and hands every other connection to Go's net/http server, "standard"
	// gives every connection to net/http. The fast path needs the direct
	// upstream transport; with "standard" there, or an HTTPS upstream, or
	// the demo, every connection goes to net/http.
	ClientTransport string `yaml:"client_transport"`
	// ShutdownTimeout bounds how long a graceful shutdown waits for
	// in-flight requests, default 30s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// Watch is how often the gateway looks for a changed file (0: the
	// default 2s; negative: never, SIGHUP only).
	Watch Duration `yaml:"watch"`
	// Paths says how the gateway treats request paths.
	Paths PathsConfig `yaml:"paths"`
	// Client bounds the gateway's client connections.
	Client ClientConfig `yaml:"client"`
	// UpstreamTimeouts bounds the gateway's work with the upstream.
	UpstreamTimeouts UpstreamTimeoutsConfig `yaml:"upstream_timeouts"`
	// Store selects the store: memory:// by default.
	Store storeconfig.Config `yaml:"store"`
	// ClientIP says how the client's address is found.
	ClientIP ClientIPConfig `yaml:"client_ip"`
	// Access holds the CIDR lists checked before any rule.
	Access AccessConfig `yaml:"access"`
	// Headers selects the rate limit headers: "both" (default), "legacy"
	// (X-RateLimit-*) or "ietf" (RateLimit-Policy and RateLimit).
	Headers string `yaml:"headers"`
	// Rules are the limits; a request falls under every rule it matches.
	Rules []RuleConfig `yaml:"rules"`
}

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
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request. Default 60s.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// BodyTimeout is the longest pause while a request body is read.
	// Default 30s.
	BodyTimeout Duration `yaml:"body_timeout"`
	// WriteTimeout is the longest a write of the answer to the client may
	// stall: a client that stops reading frees its upstream connection
	// after it. Default 60s.
	WriteTimeout Duration `yaml:"write_timeout"`
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
	Dial Duration `yaml:"dial"`
	// ResponseHeader bounds the wait for the upstream's response head
	// once the request is sent. Default 60s.
	ResponseHeader Duration `yaml:"response_header"`
	// Idle is how long an unused keep-alive connection to the upstream is
	// kept. Default 60s.
	Idle Duration `yaml:"idle"`
}

// ClientIPConfig says whom to believe about the client's address.
type ClientIPConfig struct {
	// TrustedProxies are the CIDRs (or single addresses) of proxies whose
	// forwarding header is believed. Empty: the TCP peer is the client.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Header is the forwarding header the trusted proxies set:
	// "X-Forwarded-For" (default) or "Forwarded".
	Header string `yaml:"header"`
	// IPv4Prefix is how many leading bits of an IPv4 address make a key,
	// default 32.
	IPv4Prefix int `yaml:"ipv4_prefix"`
	// IPv6Prefix is how many leading bits of an IPv6 address make a key,
	// default 64.
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

// AccessConfig lists clients by CIDR. Deny is checked first: a denied
// client gets 403. An allowed client is exempt from every rule.
type AccessConfig struct {
	// Allow lists clients that no rule limits.
	Allow []string `yaml:"allow"`
	// Deny lists clients refused with 403 before any rule.
	Deny []string `yaml:"deny"`
}

// RuleConfig is one rule as written.
type RuleConfig struct {
	// Name identifies the rule in headers, bodies, logs and metrics, and
	// is part of its keys: letters, digits, '.', '_' and '-', at most 64.
	Name string `yaml:"name"`
	// Match says which requests the rule covers; empty matches all.
	Match MatchConfig `yaml:"match"`
	// Key lists what identifies a client: "ip", "header:NAME", "route"
	// (method and path), "path", "method", "host", or "global" (one key for
	// all; also what an empty list means). Parts combine.
	Key []string `yaml:"key"`
	// OnMissingKey says what happens when a header the key needs is
	// missing or empty: "ip" (default: the client IP stands in its place),
	// "skip" (the rule does not apply) or "shared" (all such requests share
	// one counter).
	OnMissingKey string `yaml:"on_missing_key"`
	// Limit is the limit applied to each key.
	Limit LimitConfig `yaml:"limit"`
	// Mode is "enforce" (default), "shadow" or "queue".
	Mode string `yaml:"mode"`
	// MaxDelay bounds a queued request's wait (queue mode only); zero
	// leaves only the bucket's burst as the bound.
	MaxDelay Duration `yaml:"max_delay"`
}

// MatchConfig selects requests. All given conditions must hold.
type MatchConfig struct {
	// Methods the request's method must be one of (case-insensitive); GET
	// covers HEAD too, which frameworks serve with GET's handler.
	Methods []string `yaml:"methods"`
	// Path the request's path must equal.
	Path string `yaml:"path"`
	// PathPrefix the request's path must start with, at a segment
	// boundary: /v1/rewards matches /v1/rewards and /v1/rewards/7, not
	// /v1/rewardsX.
	PathPrefix string `yaml:"path_prefix"`
	// StrictPath compares Path and PathPrefix with the normalized path as
	// it is. By default (false) they also match the forms that common
	// frameworks route to the same handler: with ;params in a segment, with
	// a trailing slash, and in another letter case.
	StrictPath bool `yaml:"strict_path"`
	// Hosts the request's host (without port, case-insensitive) must be one
	// of; "*.example.com" matches any subdomain.
	Hosts []string `yaml:"hosts"`
	// Headers maps a header name to the value it must have; the value "*"
	// means only that the header is present.
	Headers map[string]string `yaml:"headers"`
}

// LimitConfig is a limit as written.
type LimitConfig struct {
	// Algorithm: token_bucket, leaky_bucket, fixed_window, sliding_log or
	// sliding_window.
	Algorithm string `yaml:"algorithm"`
	// Rate is how many requests per Period.
	Rate int `yaml:"rate"`
	// Period accepts Go durations (1s, 90m, 24h) and days and weeks (1d, 1w).
	Period Duration `yaml:"period"`
	// Burst is the buckets' capacity, default Rate.
	Burst int `yaml:"burst"`
	// Stagger offsets each key's windows by a hash of the key.
	Stagger bool `yaml:"stagger"`
	// LogRejected makes the sliding log count refused requests too.
	LogRejected bool `yaml:"log_rejected"`
}

// Duration is a time.Duration that YAML may write as a Go duration (90s,
// 1h30m) or as whole days or weeks (1d, 2w).
type Duration time.Duration

var dayWeek = regexp.MustCompile(`^([0-9]{1,6})([dw])$`)

// ParseDuration parses a Go duration or a whole number of days or weeks.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if m := dayWeek.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		unit := 24 * time.Hour
		if m[2] == "w" {
			unit *= 7
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like 500ms, 90s, 24h, 1d or 1w)", s)
	}
	return d, nil
}

// UnmarshalYAML decodes a duration, reporting a bad one with its line.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected a duration (like 1s, 24h, 1d), not a %s", n.Line, kindName(n.Kind))}}
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a Go duration, or in days or weeks
// when it is a whole number of them.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String renders d as a config file would write it.
func (d Duration) String() string {
	t := time.Duration(d)
	switch {
	case t > 0 && t%(7*24*time.Hour) == 0:
		return fmt.Sprintf("%dw", t/(7*24*time.Hour))
	case t > 0 && t%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", t/(24*time.Hour))
	}
	return t.String()
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

// Error is one problem in a configuration file, located by file, line and
// field ("file:line: field: problem"); the gateway's rules report the same
// type.
type Error = configerr.Error

// maxFileSize bounds what Parse reads: no sensible rules file is bigger.
const maxFileSize = 4 << 20

// LoadFile reads, decodes and validates the configuration file at path.
// Every problem found is reported (joined), each as an *Error.
func LoadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse decodes and validates a configuration; name (a file name) only
// labels errors.
func Parse(name string, data []byte) (*Config, error) {
	if len(data) > maxFileSize {
		return nil, &Error{File: name, Err: fmt.Errorf("file is larger than %d bytes", maxFileSize)}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(name, nil, err)
	}
	pos := indexPositions(&root)
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []error
	bad := map[string]bool{}                                          // fields that did not decode
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, yamlError(name, pos, err) // not YAML, or not a mapping
		}
		// yaml.v3 decodes what it can around type errors: report them
		// and go on validating the rest.
		for _, e := range yamlErrors(name, pos, te.Errors) {
			out = append(out, e)
			bad[e.Field] = true
		}
	}
	_, errs := c.build()
	for _, e := range errs {
		if bad[e.Field] {
			continue // its zero value is not the user's mistake
		}
		e.File = name
		e.Line = pos.line(e.Field)
		out = append(out, e)
	}
	if len(out) == 0 {
		return &c, nil
	}
	return nil, errors.Join(out...)
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line ([0-9]+): (.*)$`)

// yamlError turns yaml.v3's errors into *Errors naming file, line and, for
// type errors, the field.
func yamlError(name string, pos *positions, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var out []error
	for _, e := range yamlErrors(name, pos, msgs) {
		out = append(out, e)
	}
	return errors.Join(out...)
}

func yamlErrors(name string, pos *positions, msgs []string) []*Error {
	out := make([]*Error, 0, len(msgs))
	for _, m := range msgs {
		e := &Error{File: name, Err: errors.New(m)}
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			e.Line, _ = strconv.Atoi(g[1])
			e.Err = errors.New(g[2])
			if pos != nil {
				e.Field = pos.fieldAt(e.Line, e.Err.Error())
			}
		}
		out = append(out, e)
	}
	return out
}

// positions maps field paths of a YAML document to their lines.
type positions struct {
	lines  map[string]int
	byLine map[int][]posEntry
}

// posEntry is a field on a line, with the text it was found by: a key's name
// or a scalar value.
type posEntry struct {
	path, text string
}

func indexPositions(root *yaml.Node) *positions {
	p := &positions{lines: map[string]int{}, byLine: map[int][]posEntry{}}
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		p.walk(root.Content[0], "")
	}
	return p
}

func (p *positions) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			p.lines[child] = k.Line
			p.byLine[k.Line] = append(p.byLine[k.Line], posEntry{child, k.Value})
			if v.Kind == yaml.ScalarNode {
				p.byLine[v.Line] = append(p.byLine[v.Line], posEntry{child, v.Value})
			}
			p.walk(v, child)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			child := fmt.Sprintf("%s[%d]", path, i)
			p.lines[child] = c.Line
			if c.Kind == yaml.ScalarNode {
				p.byLine[c.Line] = append(p.byLine[c.Line], posEntry{child, c.Value})
			}
			p.walk(c, child)
		}
	}
}

// line finds the line of field, or of its nearest written ancestor.
func (p *positions) line(field string) int {
	for f := field; f != ""; {
		if l, ok := p.lines[f]; ok {
			return l
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

var quoted = regexp.MustCompile("`([^`]*)`|\"([^\"]*)\"|field ([^ ]+) not found")

// fieldAt names the field an error message on line is about: the one whose
// key or value the message quotes, or the only one on the line.
func (p *positions) fieldAt(line int, msg string) string {
	es := p.byLine[line]
	if m := quoted.FindStringSubmatch(msg); m != nil {
		text := m[1] + m[2] + m[3]
		if m[3] != "" { // an unknown field: name its parent and itself
			for _, e := range es {
				if e.text == text {
					return e.path
				}
			}
		}
		for i := len(es) - 1; i >= 0; i-- {
			if es[i].text == text {
				return es[i].path
			}
		}
	}
	if len(es) > 0 && es[0].path == es[len(es)-1].path {
		return es[0].path
	}
	return ""
}
