package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// runProxy is `ratekeeper proxy`: the gateway in front of an HTTP API.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratekeeper proxy --config FILE [flags]\n\nPuts the limits of FILE in front of its upstream. SIGHUP or a change to FILE\nreloads the rules; SIGTERM or SIGINT shuts down gracefully.\n\nflags:")
		fs.PrintDefaults()
	}
	pf := registerProxyFlags(fs)
	logger, err := pf.common.parse(fs, args, stderr, "FILE")
	if err != nil {
		return err
	}
	tuneGC(os.Getenv)
	o := pf.options(fs)
	o.Logger = logger
	hup := catchHangups()
	defer hup.stop()
	g, err := gateway.New(ctx, *pf.common.config, o)
	if err != nil {
		return err
	}
	hup.reloadUntil(ctx, logger, g.Reload)
	return g.Run(ctx)
}

// proxyFlags are proxy's flags: the servers' and its overrides of the
// file's listen addresses, upstream and client transport.
type proxyFlags struct {
	common                             *serverFlags
	listen, admin, upstream, transport *string
}

// registerProxyFlags defines proxy's flags on fs. The store flags override
// the file's store section field by field, so they have no defaults of
// their own.
func registerProxyFlags(fs *flag.FlagSet) *proxyFlags {
	return &proxyFlags{
		common:    registerServerFlags(fs, "the config `file` (see docs/reference.md); required", storeconfig.RegisterOverrideFlags),
		listen:    fs.String("listen", "", "override the file's listen `address`"),
		admin:     fs.String("admin-listen", "", "override the file's admin_listen `address`"),
		upstream:  fs.String("upstream", "", "override the file's upstream `URL` (or builtin:demo)"),
		transport: fs.String("client-transport", "", "override the file's client_transport: `fast` or standard"),
	}
}

// options are the overrides of the file that fs's flags, parsed, set: on
// the command line or by the environment (see env.go), which
// gateway.Options.Apply lays over the file.
func (p *proxyFlags) options(fs *flag.FlagSet) gateway.Options {
	o := gateway.Options{Listen: *p.listen, AdminListen: *p.admin, Upstream: *p.upstream, ClientTransport: *p.transport}
	st := &p.common.store
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "store":
			o.Store.URL = st.URL
		case "store-timeout":
			o.Store.Timeout = st.Timeout
		case "store-on-error":
			o.Store.OnError = st.OnError
		case "store-instances":
			o.Store.Instances = st.Instances
		case "store-mode":
			o.Store.Mode = st.Mode
		case "store-sync-period":
			o.Store.SyncPeriod = st.SyncPeriod
		case "store-max-keys":
			o.Store.MaxKeys = st.MaxKeys
		case "store-require":
			o.Store.Require, o.StoreNotRequired = st.Require, !st.Require
		case "store-password-file":
			o.Store.PasswordFile = absPath(st.PasswordFile)
		case "store-tls-ca-file":
			o.Store.TLS.CAFile = absPath(st.TLS.CAFile)
		case "store-tls-cert-file":
			o.Store.TLS.CertFile = absPath(st.TLS.CertFile)
		case "store-tls-key-file":
			o.Store.TLS.KeyFile = absPath(st.TLS.KeyFile)
		case "store-tls-server-name":
			o.Store.TLS.ServerName = st.TLS.ServerName
		}
	})
	o.Store.Password = st.Password
	return o
}

// absPath makes a path given on the command line absolute, so that it
// stays relative to the working directory when the config file's own
// relative paths are made relative to the file's directory.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil && p != "" {
		return a
	}
	return p
}
