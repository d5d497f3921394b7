package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ratekeeper/ratekeeper/gateway"
)

// runProxy is `ratekeeper proxy`: the gateway in front of an HTTP API.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratekeeper proxy --config FILE [flags]\n\nPuts the limits of FILE in front of its upstream. SIGHUP or a change to FILE\nreloads the rules; SIGTERM or SIGINT shuts down gracefully.\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		common   = registerServerFlags(fs, "the config `file` (see docs/gateway.md); required")
		listen   = fs.String("listen", "", "override the file's listen `address`")
		admin    = fs.String("admin-listen", "", "override the file's admin_listen `address`")
		upstream = fs.String("upstream", "", "override the file's upstream `URL` (or builtin:demo)")
		client   = fs.String("client-transport", "", "override the file's client_transport: `fast` or standard")
	)
	logger, err := common.parse(fs, args, stderr, "FILE")
	if err != nil {
		return err
	}
	tuneGC(os.Getenv)
	o := gateway.Options{Logger: logger, Listen: *listen, AdminListen: *admin, Upstream: *upstream, ClientTransport: *client}
	// Store flags given on the command line override the file's store
	// section field by field.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "store":
			o.Store.URL = common.store.URL
		case "store-timeout":
			o.Store.Timeout = common.store.Timeout
		case "store-on-error":
			o.Store.OnError = common.store.OnError
		case "store-instances":
			o.Store.Instances = common.store.Instances
		case "store-mode":
			o.Store.Mode = common.store.Mode
		case "store-sync-period":
			o.Store.SyncPeriod = common.store.SyncPeriod
		case "store-tls-ca-file":
			o.Store.TLS.CAFile = absPath(common.store.TLS.CAFile)
		case "store-tls-cert-file":
			o.Store.TLS.CertFile = absPath(common.store.TLS.CertFile)
		case "store-tls-key-file":
			o.Store.TLS.KeyFile = absPath(common.store.TLS.KeyFile)
		case "store-tls-server-name":
			o.Store.TLS.ServerName = common.store.TLS.ServerName
		}
	})
	hup := catchHangups()
	defer hup.stop()
	g, err := gateway.New(ctx, *common.config, o)
	if err != nil {
		return err
	}
	hup.reloadUntil(ctx, logger, g.Reload)
	return g.Run(ctx)
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
