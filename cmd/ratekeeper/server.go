package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/ratekeeper/ratekeeper/internal/server/tracing"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// What proxy and serve, the two long-running commands, share: the config
// path, logging, the store flags, the GC target, and reloading on SIGHUP.

// serverFlags are the flags both servers take.
type serverFlags struct {
	config   *string
	logLevel *string
	logFmt   *string
	store    storeconfig.Config
	env      fromEnv // what the environment set, once parsed
}

// registerServerFlags adds the shared flags to fs; configHelp describes
// --config, and storeFlags registers the store's (storeconfig's
// RegisterFlags, or RegisterOverrideFlags where the file has a store).
func registerServerFlags(fs *flag.FlagSet, configHelp string, storeFlags func(*flag.FlagSet, *storeconfig.Config)) *serverFlags {
	f := &serverFlags{
		config:   fs.String("config", "", configHelp),
		logLevel: fs.String("log-level", "info", "debug, info, warn or error"),
		logFmt:   fs.String("log-format", "text", "text or json"),
	}
	storeFlags(fs, &f.store)
	return f
}

// parse parses args into fs, then the environment (env.go), checks that
// --config was given and builds the logger. The logger then says which
// variables set flags and which named none. what names --config's value
// in the usage error ("FILE", "PATH").
func (f *serverFlags) parse(fs *flag.FlagSet, args []string, stderr io.Writer, what string) (*slog.Logger, error) {
	env, err := osEnv(fs, args)
	if err != nil {
		return nil, err
	}
	f.env = env
	f.store.Password = storePassword(fs, env, os.LookupEnv)
	if *f.config == "" || fs.NArg() > 0 {
		fs.Usage()
		return nil, usageError{fmt.Errorf("--config %s (or %s) is required, and no arguments", what, envName("config"))}
	}
	logger, err := newLogger(stderr, *f.logLevel, *f.logFmt)
	if err != nil {
		return nil, usageError{err}
	}
	storeconfig.LogRedisTo(logger)
	tracing.LogErrorsTo(logger)
	if len(env.set) > 0 {
		vars := make([]string, 0, len(env.set))
		for _, v := range env.set {
			vars = append(vars, v)
		}
		sort.Strings(vars)
		logger.Info("flags set by the environment", "variables", strings.Join(vars, " "))
	}
	for _, v := range env.unknown {
		logger.Warn("environment variable names no flag of this command; ignored", "variable", v, "command", fs.Name())
	}
	return logger, nil
}

// storePassword is Redis's password from RATEKEEPER_STORE_PASSWORD, unless
// --store-password-file was given on the command line, which wins.
func storePassword(fs *flag.FlagSet, env fromEnv, lookup func(string) (string, bool)) string {
	p, ok := lookup(passwordEnv)
	if !ok {
		return ""
	}
	onCommandLine := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "store-password-file" && env.set[f.Name] == "" {
			onCommandLine = true
		}
	})
	if onCommandLine {
		return ""
	}
	return p
}

// newLogger builds the slog logger the commands write to stderr.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: seconds}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", format)
}

// seconds writes every duration in the logs in one unit, seconds, as a
// number: slog's JSON would write nanoseconds, its text "1.5s" or "250ms".
func seconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}

// serverGCPercent is the collector's heap growth target in proxy and serve
// unless the GOGC environment variable sets one. Both allocate a few KB per
// request or call (mostly in net/http and grpc-go) against a live heap of a
// few MB. At Go's default of 100 the collector then runs dozens of times a
// second. 400 bought about a fifth more throughput in bench/run-gateway.sh
// and took a quarter off serve's CPU time per decision in bench/run-rls.sh.
// The price is memory: the heap may grow to five times what is live instead
// of twice, which matters only with the memory store holding millions of
// keys (set GOGC=100 or a GOMEMLIMIT there).
const serverGCPercent = 400

// tuneGC sets serverGCPercent unless GOGC is set.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
}

// hangups catches SIGHUP from its creation on, so that one arriving while a
// server starts waits in the channel instead of killing the process.
type hangups chan os.Signal

func catchHangups() hangups {
	h := make(hangups, 1)
	signal.Notify(h, syscall.SIGHUP)
	return h
}

// reloadUntil calls reload for each SIGHUP until ctx is done, in the
// background. reload logs its own outcome.
func (h hangups) reloadUntil(ctx context.Context, logger *slog.Logger, reload func() error) {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-h:
				logger.Info("SIGHUP: reloading the config")
				_ = reload()
			}
		}
	}()
}

// stop stops catching SIGHUP.
func (h hangups) stop() { signal.Stop(h) }
