package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/internal/storeconfig"
)

// proxyGCPercent is the proxy's GC target when GOGC is not set.
const proxyGCPercent = 400

// runProxy is `ratekeeper proxy`: the gateway in front of an HTTP API.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratekeeper proxy --config FILE [flags]\n\nPuts the limits of FILE in front of its upstream. SIGHUP or a change to FILE\nreloads the rules; SIGTERM or SIGINT shuts down gracefully.\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		config   = fs.String("config", "", "the config `file` (see docs/gateway.md); required")
		listen   = fs.String("listen", "", "override the file's listen `address`")
		admin    = fs.String("admin-listen", "", "override the file's admin_listen `address`")
		upstream = fs.String("upstream", "", "override the file's upstream `URL` (or builtin:demo)")
		logLevel = fs.String("log-level", "info", "debug, info, warn or error")
		logFmt   = fs.String("log-format", "text", "text or json")
		store    storeconfig.Config
	)
	storeconfig.RegisterFlags(fs, &store)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config == "" || fs.NArg() > 0 {
		fs.Usage()
		return usageError{errors.New("--config FILE is required, and no arguments")}
	}
	logger, err := newLogger(stderr, *logLevel, *logFmt)
	if err != nil {
		return usageError{err}
	}
	if os.Getenv("GOGC") == "" {
		// The proxy allocates a few KiB per request and keeps little: a
		// larger GC target bought about a fifth more throughput in
		// bench/run-gateway.sh. GOGC (and GOMEMLIMIT) still decide if set.
		debug.SetGCPercent(proxyGCPercent)
	}
	o := gateway.Options{Logger: logger, Listen: *listen, AdminListen: *admin, Upstream: *upstream}
	// Store flags given on the command line override the file's store
	// section field by field.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "store":
			o.Store.URL = store.URL
		case "store-timeout":
			o.Store.Timeout = store.Timeout
		case "store-on-error":
			o.Store.OnError = store.OnError
		case "store-instances":
			o.Store.Instances = store.Instances
		}
	})
	// Catch SIGHUP from now on: one that arrives while the gateway starts
	// waits in the channel instead of killing the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	g, err := gateway.New(ctx, *config, o)
	if err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				logger.Info("SIGHUP: reloading the config")
				_ = g.Reload()
			}
		}
	}()
	return g.Run(ctx)
}

// newLogger builds the slog logger the commands write to stderr.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", format)
}
