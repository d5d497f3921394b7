// Command ratekeeper is the rate limiter's one binary: a gateway in front of
// any HTTP API (proxy), Envoy's rate limit service (serve), the algorithm
// simulator (simulate), a config checker (check) and its version (version).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: it parses its own flags from args.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"proxy":    {"put rate limits in front of an HTTP API (a reverse proxy)", runProxy},
	"serve":    {"answer Envoy's rate limit service API (gRPC) and a JSON API", runServe},
	"simulate": {"show how each algorithm shapes a workload, as charts and a table", runSimulate},
	"check":    {"validate a config file and print what each rule does", runCheck},
	"limits":   {"list the rules of a running proxy or serve, show a client's state, reset it", runLimits},
	"top":      {"show the clients a running proxy limits most, refreshed like top", runTop},
	"version":  {"print the version and source revision of this binary", runVersion},
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args[0] = "version"
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "ratekeeper: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "ratekeeper %s: %v\n", args[0], err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError marks an error in the command line (exit code 2).
type usageError struct{ error }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ratekeeper COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'ratekeeper COMMAND -h' for a command's flags.")
}
