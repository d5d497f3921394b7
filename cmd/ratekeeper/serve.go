package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/server/adminauth"
	"github.com/ratekeeper/ratekeeper/rls"
	"github.com/ratekeeper/ratekeeper/storeconfig"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
)

// runServe is `ratekeeper serve`: Envoy's rate limit service (gRPC) and
// the JSON API.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratekeeper serve --config PATH [flags]\n\nAnswers Envoy's rate limit service API (gRPC) and a JSON API (POST /v1/check,\nPOST /v1/peek, POST /json; GET /v1/config; POST /v1/reset with --admin-token-file) with the limits of PATH: a file or a directory of files in the\nYAML of Envoy's reference rate limit service, one domain each (docs/envoy.md).\nSIGHUP or a change to PATH reloads it; SIGTERM or SIGINT shuts down gracefully.\nThe --grpc-tls-* and --http-tls-* flags make those listeners TLS (mutual TLS\nwith a client CA); the admin listener is always clear text.\n\nflags:")
		fs.PrintDefaults()
	}
	sf := registerServeFlags(fs)
	logger, err := sf.common.parse(fs, args, stderr, "PATH")
	if err != nil {
		return err
	}
	o, err := sf.options()
	if err != nil {
		return err
	}
	o.Logger = logger
	tuneGC(os.Getenv)
	hup := catchHangups()
	defer hup.stop()
	s, err := rls.NewServer(ctx, *sf.common.config, o)
	if err != nil {
		return err
	}
	hup.reloadUntil(ctx, logger, s.Reload)
	return s.Run(ctx)
}

// serveFlags are serve's flags: the servers' and the decision service's.
type serveFlags struct {
	common                                         *serverFlags
	grpcListen, httpListen, adminListen, tokenFile *string
	grpcTLS, httpTLS                               tlsFlags
	allOrNothing, headers, protectReads            *bool
	watch, shutdown                                *time.Duration
	maxDescs, maxEntries                           *int
}

// registerServeFlags defines serve's flags on fs.
func registerServeFlags(fs *flag.FlagSet) *serveFlags {
	return &serveFlags{
		common:       registerServerFlags(fs, "the config `path`: a YAML file or a directory of them; required", storeconfig.RegisterFlags),
		grpcListen:   fs.String("grpc-listen", rls.DefaultGRPCListen, "gRPC `address` (envoy.service.ratelimit.v3, health, reflection)"),
		httpListen:   fs.String("http-listen", rls.DefaultHTTPListen, "HTTP JSON API `address`, or - for none"),
		adminListen:  fs.String("admin-listen", rls.DefaultAdminListen, "admin `address` (/metrics, /healthz, /readyz, /v1/top, /v1/status, /ui/), or - for none; always clear text, so keep it on a private address"),
		grpcTLS:      registerTLSFlags(fs, "grpc", "the gRPC listener"),
		httpTLS:      registerTLSFlags(fs, "http", "the HTTP JSON API"),
		allOrNothing: fs.Bool("all-or-nothing", false, "a request over the limit on one descriptor uses no quota on the others"),
		headers:      fs.Bool("response-headers", false, "add RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (and Retry-After) to responses"),
		watch:        fs.Duration("watch", rls.DefaultWatch, "how often to poll the config for changes (negative: never)"),
		shutdown:     fs.Duration("shutdown-timeout", rls.DefaultShutdownTimeout, "how long SIGTERM waits for calls in flight"),
		maxDescs:     fs.Int("max-descriptors", rls.DefaultMaxDescriptors, "refuse (InvalidArgument, HTTP 400) a request of more than `n` descriptors"),
		maxEntries:   fs.Int("max-entries", rls.DefaultMaxEntries, "refuse (InvalidArgument, HTTP 400) a request with a descriptor of more than `n` entries"),
		tokenFile:    fs.String("admin-token-file", "", "a `file` holding the bearer token that turns on POST /v1/reset (off without it) and guards GET /v1/top"),
		protectReads: fs.Bool("admin-protect-reads", false, "ask for the admin token on GET /v1/config and GET /v1/status too"),
	}
}

// options are the server's options that the parsed flags set, all but the
// logger. Flags that do not go together are a usage error.
func (f *serveFlags) options() (rls.ServerOptions, error) {
	gt, err := f.grpcTLS.server()
	if err != nil {
		return rls.ServerOptions{}, err
	}
	ht, err := f.httpTLS.server()
	if err != nil {
		return rls.ServerOptions{}, err
	}
	if *f.httpListen == "-" && ht.Enabled() {
		return rls.ServerOptions{}, usageError{fmt.Errorf("--http-tls-* flags are set, but --http-listen is -")}
	}
	var token string
	if *f.tokenFile != "" {
		if token, err = adminauth.Load(*f.tokenFile, ""); err != nil {
			return rls.ServerOptions{}, usageError{fmt.Errorf("--admin-token-file: %w", err)}
		}
	} else if *f.protectReads {
		return rls.ServerOptions{}, usageError{fmt.Errorf("--admin-protect-reads needs --admin-token-file")}
	}
	return rls.ServerOptions{
		GRPCListen:      *f.grpcListen,
		HTTPListen:      *f.httpListen,
		AdminListen:     *f.adminListen,
		GRPCTLS:         gt,
		HTTPTLS:         ht,
		Store:           f.common.store.WithDefaults(),
		AllOrNothing:    *f.allOrNothing,
		ResponseHeaders: *f.headers,
		MaxDescriptors:  *f.maxDescs,
		MaxEntries:      *f.maxEntries,
		Watch:           *f.watch,
		ShutdownTimeout: *f.shutdown,
		AdminToken:      token,
		ProtectReads:    *f.protectReads,
	}, nil
}

// tlsFlags are a listener's --PREFIX-tls-cert-file, --PREFIX-tls-key-file
// and --PREFIX-tls-client-ca-file.
type tlsFlags struct {
	prefix              string
	cert, key, clientCA *string
}

// registerTLSFlags defines a listener's TLS flags on fs; what names the
// listener in their help.
func registerTLSFlags(fs *flag.FlagSet, prefix, what string) tlsFlags {
	return tlsFlags{
		prefix:   prefix,
		cert:     fs.String(prefix+"-tls-cert-file", "", "PEM certificate `file` (with its chain) that makes "+what+" TLS-only, with --"+prefix+"-tls-key-file; a renewed file is served from the next handshake (default: clear text)"),
		key:      fs.String(prefix+"-tls-key-file", "", "PEM private key `file` of --"+prefix+"-tls-cert-file"),
		clientCA: fs.String(prefix+"-tls-client-ca-file", "", "PEM `file` of the CAs that client certificates must chain to: "+what+" refuses a client without one (mutual TLS; default: no client certificate asked)"),
	}
}

// server is the listener's TLS, the zero Server for clear text, or an
// error naming the flag at fault: a file missing, unreadable, or a key
// that is not the certificate's.
func (f tlsFlags) server() (tlsconfig.Server, error) {
	ts := tlsconfig.Server{CertFile: *f.cert, KeyFile: *f.key, ClientCAFile: *f.clientCA}
	if !ts.Enabled() {
		return ts, nil
	}
	if ts.CertFile == "" || ts.KeyFile == "" {
		return ts, usageError{fmt.Errorf("--%[1]s-tls-cert-file and --%[1]s-tls-key-file go together, and --%[1]s-tls-client-ca-file needs them", f.prefix)}
	}
	for _, p := range ts.Problems() {
		return ts, fmt.Errorf("--%s-tls-%s: %w", f.prefix, strings.ReplaceAll(p.Field, "_", "-"), p.Err)
	}
	return ts, nil
}
