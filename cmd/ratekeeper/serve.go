package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/ratekeeper/ratekeeper/internal/storeconfig"
	"github.com/ratekeeper/ratekeeper/rls"
)

// runServe is `ratekeeper serve`: Envoy's rate limit service (gRPC) and
// the JSON API.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratekeeper serve --config PATH [flags]\n\nAnswers Envoy's rate limit service API (gRPC) and a JSON API (POST /v1/check,\nPOST /json) with the limits of PATH: a file or a directory of files in the\nYAML of Envoy's reference rate limit service, one domain each (docs/envoy.md).\nSIGHUP or a change to PATH reloads it; SIGTERM or SIGINT shuts down gracefully.\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		config       = fs.String("config", "", "the config `path`: a YAML file or a directory of them; required")
		grpcListen   = fs.String("grpc-listen", rls.DefaultGRPCListen, "gRPC `address` (envoy.service.ratelimit.v3, health, reflection)")
		httpListen   = fs.String("http-listen", rls.DefaultHTTPListen, "HTTP JSON API `address`, or - for none")
		adminListen  = fs.String("admin-listen", rls.DefaultAdminListen, "admin `address` (/metrics, /healthz, /readyz), or - for none")
		allOrNothing = fs.Bool("all-or-nothing", false, "a request over the limit on one descriptor uses no quota on the others")
		headers      = fs.Bool("response-headers", false, "add RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (and Retry-After) to responses")
		watch        = fs.Duration("watch", rls.DefaultWatch, "how often to poll the config for changes (negative: never)")
		logLevel     = fs.String("log-level", "info", "debug, info, warn or error")
		logFmt       = fs.String("log-format", "text", "text or json")
		store        storeconfig.Config
	)
	storeconfig.RegisterFlags(fs, &store)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config == "" || fs.NArg() > 0 {
		fs.Usage()
		return usageError{errors.New("--config PATH is required, and no arguments")}
	}
	logger, err := newLogger(stderr, *logLevel, *logFmt)
	if err != nil {
		return usageError{err}
	}
	tuneGC(os.Getenv)
	s, err := rls.NewServer(ctx, *config, rls.ServerOptions{
		Logger:          logger,
		GRPCListen:      *grpcListen,
		HTTPListen:      *httpListen,
		AdminListen:     *adminListen,
		Store:           store.WithDefaults(),
		AllOrNothing:    *allOrNothing,
		ResponseHeaders: *headers,
		Watch:           *watch,
	})
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				logger.Info("SIGHUP: reloading the config")
				_ = s.Reload()
			}
		}
	}()
	return s.Run(ctx)
}

// serveGCPercent is the collector's heap growth target in serve unless the
// GOGC environment variable sets one. Each gRPC call allocates some 6 KB
// (most of it in grpc-go's header handling) against a live heap of a few
// MB, so at the default 100 the collector ran dozens of times a second, and
// each cycle also shrank the stacks of idle call workers, which then grew
// again: 400 took a quarter off the service's CPU time per decision
// (bench/run-rls.sh, Redis store). The price is memory: the heap may grow
// to five times what is live instead of twice, which matters only with
// the memory store holding millions of keys (set GOGC=100 there).
const serveGCPercent = 400

// tuneGC sets serveGCPercent unless GOGC is set.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
}
