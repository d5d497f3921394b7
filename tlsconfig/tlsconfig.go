package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a listener's TLS: yaml `{cert_file, key_file, certificates,
// min_version, client_ca_file}`. The zero Server is no TLS.
type Server struct {
	// CertFile and KeyFile are the PEM certificate (with its chain) and
	// private key served by default: to clients that send no server name,
	// or one that no other certificate covers.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// Certificates are more pairs, each served to the clients that ask
	// for a name it covers (SNI).
	Certificates []Pair `yaml:"certificates"`
	// MinVersion is the oldest TLS version accepted: "1.2" (the default)
	// or "1.3".
	MinVersion string `yaml:"min_version"`
	// ClientCAFile, if set, asks every client for a certificate and
	// accepts only those that chain to a CA in this PEM file (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

// Pair is a certificate and its private key, both PEM files.
type Pair struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Client is a dialer's TLS: yaml `{ca_file, cert_file, key_file,
// server_name, insecure_skip_verify}`. The zero Client verifies the
// server against the system's roots and sends no certificate.
type Client struct {
	// CAFile, if set, is the PEM file of the CAs that the server's
	// certificate must chain to, instead of the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile, if set, are the client certificate sent to a
	// server that asks for one (mutual TLS).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must hold, when it
	// is not the host being dialed (an IP address, a name behind a load
	// balancer).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any certificate from the server, which
	// lets anyone on the path read and change the traffic; it is logged
	// as a warning. For tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// FieldError is a problem with one field of a TLS section, named by its
// YAML key (like "certificates[1].key_file").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Options adjust how a tls.Config follows its files.
type Options struct {
	// Logger is told when files are reloaded, or fail to; nil discards.
	Logger *slog.Logger
	// Interval is how often, at most, the files are looked at (on a
	// handshake that needs them): 0 is DefaultInterval, negative never.
	Interval time.Duration
	// NextProtos are the ALPN protocols a Server offers, in order of
	// preference (like "h2", "http/1.1").
	NextProtos []string
}

// DefaultInterval is how often, at most, a tls.Config looks whether its
// files changed.
const DefaultInterval = time.Second

// Enabled reports whether s asks for TLS at all.
func (s Server) Enabled() bool {
	return s.CertFile != "" || s.KeyFile != "" || len(s.Certificates) > 0 || s.ClientCAFile != "" || s.MinVersion != ""
}

// pairs names each certificate pair with the path of its fields, the
// default one first.
func (s Server) pairs() []namedPair {
	var out []namedPair
	if s.CertFile != "" || s.KeyFile != "" || len(s.Certificates) == 0 {
		out = append(out, namedPair{"", Pair{s.CertFile, s.KeyFile}})
	}
	for i, p := range s.Certificates {
		out = append(out, namedPair{fmt.Sprintf("certificates[%d].", i), p})
	}
	return out
}

type namedPair struct {
	prefix string
	Pair
}

// Problems lists what is wrong with s, reading its files: a missing, unreadable or unparsable file, a key
// that is not the certificate's, an unknown version. Nil when s is not
// Enabled.
func (s Server) Problems() []*FieldError {
	if !s.Enabled() {
		return nil
	}
	_, errs := s.load()
	return errs
}

// Resolve makes s's relative paths relative to dir (a config file's
// directory), and returns s.
func (s Server) Resolve(dir string) Server {
	s.CertFile, s.KeyFile, s.ClientCAFile = resolve(dir, s.CertFile), resolve(dir, s.KeyFile), resolve(dir, s.ClientCAFile)
	s.Certificates = slices.Clone(s.Certificates)
	for i, p := range s.Certificates {
		s.Certificates[i] = Pair{resolve(dir, p.CertFile), resolve(dir, p.KeyFile)}
	}
	return s
}

// Config returns the tls.Config s describes, or the first of its
// problems. The config follows the files. On a handshake at least
// o.Interval after the last look, it looks whether any file changed, and
// if so loads them all again. Files that fail to load (a renewal half
// written) are logged, and the previous ones kept. Connections already
// open are not touched.
func (s Server) Config(o Options) (*tls.Config, error) {
	if !s.Enabled() {
		return nil, errors.New("tls: no certificate configured")
	}
	f, err := newFollower(s.files(), o, func() (*tls.Config, error) {
		c, errs := s.load()
		if len(errs) > 0 {
			return nil, errs[0]
		}
		c.NextProtos = o.NextProtos
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	first := f.get()
	return &tls.Config{
		MinVersion: first.MinVersion,
		NextProtos: o.NextProtos,
		// Handshakes take the certificates as they are now.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.get(), nil },
	}, nil
}

// files are the paths s reads.
func (s Server) files() []string {
	var out []string
	for _, p := range s.pairs() {
		out = append(out, p.CertFile, p.KeyFile)
	}
	if s.ClientCAFile != "" {
		out = append(out, s.ClientCAFile)
	}
	return out
}

// load reads every file of s into a config, or says what is wrong.
func (s Server) load() (*tls.Config, []*FieldError) {
	var errs []*FieldError
	fail := func(field string, err error) { errs = append(errs, &FieldError{field, err}) }
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	switch s.MinVersion {
	case "", "1.2":
	case "1.3":
		c.MinVersion = tls.VersionTLS13
	default:
		fail("min_version", fmt.Errorf("%q: use 1.2 or 1.3", s.MinVersion))
	}
	for _, p := range s.pairs() {
		cert, err := loadPair(p.Pair)
		if err != nil {
			fail(p.prefix+err.Field, err.Err)
			continue
		}
		c.Certificates = append(c.Certificates, cert)
	}
	if s.ClientCAFile != "" {
		pool, err := loadPool(s.ClientCAFile)
		if err != nil {
			fail("client_ca_file", err)
		} else {
			c.ClientCAs = pool
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return c, errs
}

// IsZero reports whether c is the zero Client (system roots, no client
// certificate, the dialed host's name).
func (c Client) IsZero() bool { return c == Client{} }

// Problems lists what is wrong with c, reading its files.
func (c Client) Problems() []*FieldError {
	_, errs := c.load()
	return errs
}

// Resolve makes c's relative paths relative to dir (a config file's
// directory), and returns c.
func (c Client) Resolve(dir string) Client {
	c.CAFile, c.CertFile, c.KeyFile = resolve(dir, c.CAFile), resolve(dir, c.CertFile), resolve(dir, c.KeyFile)
	return c
}

// Config returns the tls.Config c describes, or the first of its
// problems. A client certificate follows its files as a Server's do (read
// again when a server asks for it, at most every o.Interval); the CA file
// is read once.
func (c Client) Config(o Options) (*tls.Config, error) {
	cfg, errs := c.load()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	if c.InsecureSkipVerify {
		logger(o).Warn("TLS: insecure_skip_verify is set: any certificate is accepted from the server, so anyone on the path can read and change the traffic")
	}
	if c.CertFile != "" {
		pair := Pair{c.CertFile, c.KeyFile}
		f, err := newFollower([]string{c.CertFile, c.KeyFile}, o, func() (*tls.Certificate, error) {
			cert, err := loadPair(pair)
			if err != nil {
				return nil, err
			}
			return &cert, nil
		})
		if err != nil {
			return nil, err
		}
		cfg.Certificates = nil
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return f.get(), nil }
	}
	return cfg, nil
}

func (c Client) load() (*tls.Config, []*FieldError) {
	var errs []*FieldError
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			errs = append(errs, &FieldError{"ca_file", err})
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := loadPair(Pair{c.CertFile, c.KeyFile})
		if err != nil {
			errs = append(errs, err)
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg, errs
}

// loadPair reads a certificate and its key, and checks that they belong
// together.
func loadPair(p Pair) (tls.Certificate, *FieldError) {
	switch {
	case p.CertFile == "" && p.KeyFile == "":
		return tls.Certificate{}, &FieldError{"cert_file", errors.New("is missing (and key_file): the PEM certificate to serve")}
	case p.CertFile == "":
		return tls.Certificate{}, &FieldError{"cert_file", errors.New("is missing: key_file is set without its certificate")}
	case p.KeyFile == "":
		return tls.Certificate{}, &FieldError{"key_file", errors.New("is missing: cert_file is set without its private key")}
	}
	certPEM, err := os.ReadFile(p.CertFile)
	if err != nil {
		return tls.Certificate{}, &FieldError{"cert_file", err}
	}
	keyPEM, err := os.ReadFile(p.KeyFile)
	if err != nil {
		return tls.Certificate{}, &FieldError{"key_file", err}
	}
	// X509KeyPair's errors name no file, and its message for a
	// certificate file holding a key ("PEM inputs may have been switched")
	// speaks of the key: such a file is the certificate's fault.
	if !holdsCertificate(certPEM) {
		return tls.Certificate{}, &FieldError{"cert_file", fmt.Errorf("%s holds no PEM certificate", p.CertFile)}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		field := "cert_file"
		if strings.Contains(err.Error(), "key") {
			field = "key_file"
		}
		return tls.Certificate{}, &FieldError{field, fmt.Errorf("%s and %s: %w", p.CertFile, p.KeyFile, err)}
	}
	return cert, nil
}

// holdsCertificate reports whether b has a PEM CERTIFICATE block.
func holdsCertificate(b []byte) bool {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" {
			return true
		}
	}
}

// loadPool reads a PEM file of CA certificates.
func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// resolve takes a relative path from dir.
func resolve(dir, path string) string {
	if path == "" || filepath.IsAbs(path) || dir == "" {
		return path
	}
	return filepath.Join(dir, path)
}

func logger(o Options) *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// follower holds what load made of files, and loads it again when one of
// them changes (looked at on get, at most every interval).
type follower[T any] struct {
	files    []string
	load     func() (*T, error)
	interval time.Duration
	logger   *slog.Logger

	cur atomic.Pointer[T]

	mu     sync.Mutex
	next   time.Time // when to look again
	seen   []stamp   // the files' stamps when cur was loaded
	failed []stamp   // the stamps that last failed to load, logged once
}

// stamp is what tells a file changed: its size and time, after symlinks
// (a Kubernetes secret is a symlink swapped to a new directory).
type stamp struct {
	size int64
	mod  time.Time
	err  string
}

func newFollower[T any](files []string, o Options, load func() (*T, error)) (*follower[T], error) {
	f := &follower[T]{files: files, load: load, interval: o.Interval, logger: logger(o)}
	if f.interval == 0 {
		f.interval = DefaultInterval
	}
	f.seen = f.stamps()
	v, err := load()
	if err != nil {
		return nil, err
	}
	f.cur.Store(v)
	f.next = time.Now().Add(f.interval)
	return f, nil
}

func (f *follower[T]) stamps() []stamp {
	out := make([]stamp, len(f.files))
	for i, name := range f.files {
		if fi, err := os.Stat(name); err != nil {
			out[i].err = err.Error()
		} else {
			out[i] = stamp{size: fi.Size(), mod: fi.ModTime()}
		}
	}
	return out
}

// get returns the current value, loading the files again if they
// changed.
func (f *follower[T]) get() *T {
	if f.interval < 0 {
		return f.cur.Load()
	}
	now := time.Now()
	if !f.mu.TryLock() {
		return f.cur.Load() // another handshake is looking
	}
	defer f.mu.Unlock()
	if now.Before(f.next) {
		return f.cur.Load()
	}
	f.next = now.Add(f.interval)
	st := f.stamps()
	if slices.Equal(st, f.seen) || slices.Equal(st, f.failed) {
		return f.cur.Load()
	}
	v, err := f.load()
	if err != nil {
		f.failed = st
		f.logger.Error("TLS files changed but do not load; keeping the previous ones", "files", f.files, "err", err)
		return f.cur.Load()
	}
	f.seen, f.failed = st, nil
	f.cur.Store(v)
	f.logger.Info("TLS files reloaded", "files", f.files)
	return v
}
