package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

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
		common       = registerServerFlags(fs, "the config `path`: a YAML file or a directory of them; required")
		grpcListen   = fs.String("grpc-listen", rls.DefaultGRPCListen, "gRPC `address` (envoy.service.ratelimit.v3, health, reflection)")
		httpListen   = fs.String("http-listen", rls.DefaultHTTPListen, "HTTP JSON API `address`, or - for none")
		adminListen  = fs.String("admin-listen", rls.DefaultAdminListen, "admin `address` (/metrics, /healthz, /readyz), or - for none")
		allOrNothing = fs.Bool("all-or-nothing", false, "a request over the limit on one descriptor uses no quota on the others")
		headers      = fs.Bool("response-headers", false, "add RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (and Retry-After) to responses")
		watch        = fs.Duration("watch", rls.DefaultWatch, "how often to poll the config for changes (negative: never)")
		shutdown     = fs.Duration("shutdown-timeout", rls.DefaultShutdownTimeout, "how long SIGTERM waits for calls in flight")
		maxDescs     = fs.Int("max-descriptors", rls.DefaultMaxDescriptors, "refuse (InvalidArgument, HTTP 400) a request of more than `n` descriptors")
		maxEntries   = fs.Int("max-entries", rls.DefaultMaxEntries, "refuse (InvalidArgument, HTTP 400) a request with a descriptor of more than `n` entries")
	)
	logger, err := common.parse(fs, args, stderr, "PATH")
	if err != nil {
		return err
	}
	tuneGC(os.Getenv)
	hup := catchHangups()
	defer hup.stop()
	s, err := rls.NewServer(ctx, *common.config, rls.ServerOptions{
		Logger:          logger,
		GRPCListen:      *grpcListen,
		HTTPListen:      *httpListen,
		AdminListen:     *adminListen,
		Store:           common.store.WithDefaults(),
		AllOrNothing:    *allOrNothing,
		ResponseHeaders: *headers,
		MaxDescriptors:  *maxDescs,
		MaxEntries:      *maxEntries,
		Watch:           *watch,
		ShutdownTimeout: *shutdown,
	})
	if err != nil {
		return err
	}
	hup.reloadUntil(ctx, logger, s.Reload)
	return s.Run(ctx)
}
