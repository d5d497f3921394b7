package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/internal/algo"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// errInvalid makes check exit 1 after it printed the problems itself.
var errInvalid = errors.New("the config is not valid")

// runCheck is `ratekeeper check --config FILE`: validate the file and say
// what each rule does.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "the config `file` to check; required")
	connect := fs.Bool("connect", false, "also ask the store's Redis, as proxy and serve do at start, whether it answers and accepts the settings (default: no connection)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratekeeper check --config PATH\n\nValidates PATH and prints what each rule does, with the settings that\nRATEKEEPER_* environment variables override as the server would\n(its flags win over the environment, the environment over the file).\nPATH is ratekeeper proxy's file, or ratekeeper serve's descriptor file or\ndirectory of them (a file with a domain); warnings name what serve would\naccept but can never apply. Exit status 1 if it is invalid.\n\nflags:")
		fs.PrintDefaults()
	}
	if _, err := osEnv(fs, args); err != nil {
		return err
	}
	if *config == "" || fs.NArg() > 0 {
		fs.Usage()
		return usageError{errors.New("--config FILE (or RATEKEEPER_CONFIG) is required, and no arguments")}
	}
	if isServeConfig(*config) {
		return checkServe(ctx, *config, *connect, stdout, stderr)
	}
	// The proxy's flags, set by the environment alone, as the proxy would
	// lay them over the file.
	pfs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	pfs.SetOutput(io.Discard)
	pf := registerProxyFlags(pfs)
	env, err := applyEnv(pfs, os.LookupEnv, os.Environ())
	if err != nil {
		return err
	}
	pf.common.store.Password = storePassword(pfs, env, os.LookupEnv)
	c, err := gateway.LoadFile(*config)
	var set *rules.Set
	if err == nil {
		pf.options(pfs).Apply(c)
		if err = c.Store.Validate(); err != nil {
			err = fmt.Errorf("store, with the environment's overrides (%s): %w", envList(env), err)
		}
	}
	if err == nil {
		set, err = rules.Compile(&c.Config)
	}
	if err == nil && *connect {
		err = connectStore(ctx, c.Store)
	}
	if err != nil {
		printErrors(stderr, err)
		return errInvalid
	}
	fmt.Fprintf(stdout, "%s: valid\n", *config)
	printConnected(stdout, *connect, c.Store)
	fmt.Fprintln(stdout)
	printConfig(stdout, c, set, time.Now())
	printEnv(stdout, pfs, env)
	return nil
}

// connectStore opens the store as a server would at start, with
// store.require, and closes it: an error if Redis refuses the settings or
// does not answer.
func connectStore(ctx context.Context, c storeconfig.Config) error {
	if c.IsMemory() {
		return nil
	}
	c.Require = true
	_, closer, err := storeconfig.Open(ctx, c, nil)
	if err != nil {
		return err
	}
	return closer.Close()
}

// printConnected says that --connect found Redis answering.
func printConnected(w io.Writer, connect bool, c storeconfig.Config) {
	if connect && !c.IsMemory() {
		fmt.Fprintf(w, "%s answers and accepts the settings (--connect)\n", c.Redacted())
	}
}

// printErrors prints each of the joined errors of err on a line.
func printErrors(w io.Writer, err error) {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			printErrors(w, e)
		}
		return
	}
	fmt.Fprintln(w, err)
}

// envList names the variables that set flags, or says there are none.
func envList(env fromEnv) string {
	if len(env.set) == 0 {
		return "none set"
	}
	vars := make([]string, 0, len(env.set))
	for _, v := range env.set {
		vars = append(vars, v)
	}
	sort.Strings(vars)
	return strings.Join(vars, ", ")
}

// printEnv says which of proxy's settings the environment overrides, in
// which order the sources apply, and which variables name no flag.
func printEnv(w io.Writer, fs *flag.FlagSet, env fromEnv) {
	fmt.Fprintf(w, "\nsettings: ratekeeper proxy's flags win, then RATEKEEPER_* variables, then the file\n")
	if p, ok := os.LookupEnv(passwordEnv); ok && p != "" {
		fmt.Fprintf(w, "  the store's password from %s\n", passwordEnv)
	}
	if len(env.set) == 0 {
		fmt.Fprintf(w, "  no variable overrides the file\n")
	}
	fs.VisitAll(func(f *flag.Flag) {
		if v := env.set[f.Name]; v != "" {
			val := f.Value.String()
			if f.Name == "store" {
				val = storeconfig.Config{URL: val}.Redacted()
			}
			fmt.Fprintf(w, "  --%s = %s, from %s\n", f.Name, val, v)
		}
	})
	for _, v := range env.unknown {
		fmt.Fprintf(w, "  %s names no flag of ratekeeper proxy: ignored\n", v)
	}
}

// printConfig says what c does, the resets of its calendar rules counted
// from now.
func printConfig(w io.Writer, c *gateway.Config, set *rules.Set, now time.Time) {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	fmt.Fprintf(w, "listen:     %s\n", or(c.Listen, "127.0.0.1:8080 (default)"))
	fmt.Fprintf(w, "admin:      %s\n", or(c.AdminListen, "none"))
	if c.AdminListen != "" {
		reads := "open"
		if c.Admin.ProtectReads {
			reads = "need the token"
		}
		reset := "off"
		if c.Admin.Reset {
			reset = "on, with the bearer token of " + or(c.Admin.TokenFile, "$"+c.Admin.TokenEnv)
		}
		fmt.Fprintf(w, "            GET /v1/rules and /v1/rules/RULE/state %s; POST /v1/rules/RULE/reset %s\n", reads, reset)
	}
	fmt.Fprintf(w, "protocols:  %s\n", listenerProtocols(c))
	fmt.Fprintf(w, "upstream:   %s\n", or(c.Upstream, "(none: needed by ratekeeper proxy)"))
	if strings.HasPrefix(c.Upstream, "http") {
		fmt.Fprintf(w, "            spoken to in %s\n", upstreamProtocol(c))
	}
	fmt.Fprintf(w, "store:      %s\n", c.Store)
	ci := "the TCP peer (no trusted proxies)"
	if len(c.ClientIP.TrustedProxies) > 0 {
		ci = fmt.Sprintf("%s from trusted proxies %s, else the TCP peer", or(c.ClientIP.Header, "X-Forwarded-For"), strings.Join(c.ClientIP.TrustedProxies, ", "))
	}
	fmt.Fprintf(w, "client IP:  %s\n", ci)
	if len(c.Access.Deny) > 0 {
		fmt.Fprintf(w, "deny (403): %s\n", strings.Join(c.Access.Deny, ", "))
	}
	if len(c.Access.Allow) > 0 {
		fmt.Fprintf(w, "exempt:     %s\n", strings.Join(c.Access.Allow, ", "))
	}
	fmt.Fprintf(w, "headers:    %s\n", or(c.Headers, "both"))
	fmt.Fprintf(w, "\n%d rules (a request falls under every rule it matches; it passes only if all allow it):\n", len(set.Rules))
	shared := c.Store.WithDefaults()
	for i, r := range set.Rules {
		fmt.Fprintf(w, "  %d. %s\n", i+1, r.Describe())
		if r.IsConcurrency() {
			describeSlots(w, r, shared.IsMemory())
			continue
		}
		printResets(w, r, now)
		mode := shared.Mode
		switch {
		case r.StoreMode != "" && shared.IsMemory():
			fmt.Fprintf(w, "     store_mode %s has no effect: the memory store decides every request exactly\n", r.StoreMode)
			continue
		case r.StoreMode != "":
			mode = r.StoreMode
			fmt.Fprintf(w, "     store mode %s (the store's: %s)\n", mode, shared.Mode)
		}
		if !shared.IsMemory() && mode != "exact" && !localIn(r) {
			fmt.Fprintf(w, "     decided in Redis on every request: the %s stays exact in %s mode\n", what(r), mode)
		} else if !shared.IsMemory() && mode != "exact" && r.Ban > 0 {
			fmt.Fprintf(w, "     its ban is checked in Redis on every request: bans stay exact in %s mode\n", mode)
		}
	}
}

// printResets prints the next two resets after now of rule r's calendar
// limits, in their time zone and in UTC: the rule's own, then those of its
// overrides and tiers that reset at other times. It prints the rule's zone
// data too (rules.ZoneData), and the bound of the offsets its clients'
// proxies may give (offset_header).
func printResets(w io.Writer, r *rules.Rule, now time.Time) {
	_, own, _ := algo.CalendarPeriod(r.Limit, now)
	say := func(who string, l ratekeeper.Limit) {
		_, first, ok := algo.CalendarPeriod(l, now)
		if !ok || (who != "" && first.Equal(own)) {
			return
		}
		_, second, _ := algo.CalendarPeriod(l, first)
		fmt.Fprintf(w, "     %sresets %s, then %s\n", who, inZoneAndUTC(first), inZoneAndUTC(second))
	}
	say("", r.Limit)
	if r.Limit.Calendar != "" {
		fmt.Fprintf(w, "     zone data %s: every instance on one store must show the same\n", rules.ZoneData(r.Limit.Location))
	}
	for _, a := range r.Alts {
		say(fmt.Sprintf("%q ", a.Name), a.Limit)
	}
	if h := r.Config.OffsetHeader; h != "" && r.Limit.Calendar != "" {
		fmt.Fprintf(w, "     a client whose trusted proxy gives %s resets at its own boundaries: the offset, 0 up to less than %s (an override's written offset wins)\n",
			h, rules.Duration(r.Limit.Calendar.MaxOffset()))
	}
}

// inZoneAndUTC writes t in its own zone, then in UTC.
func inZoneAndUTC(t time.Time) string {
	const layout = "Mon 2006-01-02 15:04:05 MST"
	return t.Format(layout) + " (" + t.UTC().Format(layout) + ")"
}

// localIn reports whether sync and lease modes decide rule r locally: the
// fixed window, the sliding window counter and the buckets' meter do; the
// sliding log and the leaky bucket's queue stay exact.
func localIn(r *rules.Rule) bool {
	return r.Limit.Algorithm != ratekeeper.SlidingLog && r.Mode != rules.Queue
}

func what(r *rules.Rule) string {
	if r.Mode == rules.Queue {
		return "leaky bucket's queue"
	}
	return "sliding log"
}

// listenerProtocols says what the listener speaks.
func listenerProtocols(c *gateway.Config) string {
	if !c.TLS.Enabled() {
		if c.H2C {
			return "HTTP/1.1 and HTTP/2 (h2c, prior knowledge), clear text"
		}
		return "HTTP/1.1, clear text (no tls section)"
	}
	n := len(c.TLS.Certificates)
	if c.TLS.CertFile != "" {
		n++
	}
	s := fmt.Sprintf("HTTPS: HTTP/2 and HTTP/1.1 by ALPN, TLS %s or later, %d certificate(s)", cmp.Or(c.TLS.MinVersion, "1.2"), n)
	if n > 1 {
		s += " chosen by SNI"
	}
	if c.TLS.ClientCAFile != "" {
		s += ", client certificates required (mutual TLS)"
	}
	return s
}

// upstreamProtocol says how the upstream is spoken to.
func upstreamProtocol(c *gateway.Config) string {
	https := strings.HasPrefix(c.Upstream, "https:")
	var s string
	switch c.UpstreamProtocol {
	case gateway.ProtocolH2:
		s = "HTTP/2 (prior knowledge, h2c)"
		if https {
			s = "HTTP/2 (h2 by ALPN)"
		}
	default:
		s = "HTTP/1.1"
	}
	if https {
		u := c.UpstreamTLS
		switch {
		case u.InsecureSkipVerify:
			s += ", its certificate NOT verified (insecure_skip_verify)"
		case u.CAFile != "":
			s += ", verified against " + u.CAFile
		default:
			s += ", verified against the system's CAs"
		}
		if u.CertFile != "" {
			s += ", with a client certificate"
		}
	}
	return s
}

// describeSlots says where a concurrency rule's slots live: in memory they
// go with the process; in Redis they are leases that a crash leaves taken
// for at most their TTL.
func describeSlots(w io.Writer, r *rules.Rule, memory bool) {
	if memory {
		fmt.Fprintf(w, "     slots held in memory, exactly; the fast path hands these requests to net/http, which sees each response end\n")
		return
	}
	ttl := r.Concurrency.TTL
	if ttl == 0 {
		ttl = ratekeeper.DefaultLeaseTTL
	}
	fmt.Fprintf(w, "     slots are leases in Redis, refreshed every %s while a request runs; a crashed gateway's come back within %s\n", rules.Duration(ttl/3), rules.Duration(ttl))
}
