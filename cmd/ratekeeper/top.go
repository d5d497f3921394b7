package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/server/adminauth"
	dash "github.com/ratekeeper/ratekeeper/internal/server/dashboard"
)

const topUsage = `usage: ratekeeper top --admin URL [flags]

Shows the clients a running proxy or serve limits most, per rule, and
refreshes like top (GET /v1/top on its admin listener). Each count is within its
± error of the true one. A URL may be written host:port, or :port for
localhost. Every flag is also a RATEKEEPER_* variable.

flags:`

// topFlags are the flags of ratekeeper top.
type topFlags struct {
	admin, tokenFile, rule, span string
	scope                        string
	n                            int
	every, timeout               time.Duration
	once                         bool
}

func newTopFlags(stderr io.Writer) (*flag.FlagSet, *topFlags) {
	f := &topFlags{}
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.admin, "admin", "", "the admin listener of the proxy or serve: `URL` (http://127.0.0.1:9090), or host:port, or :port")
	fs.StringVar(&f.tokenFile, "token-file", "", "a `file` holding the bearer token, when the proxy protects reads or serve has one")
	fs.StringVar(&f.rule, "rule", "", "only this `rule` (default: every rule)")
	fs.StringVar(&f.span, "span", dash.SpanMinute, "the `span` counted: 1m or 1h")
	fs.StringVar(&f.scope, "scope", dash.ScopeLocal, "whose counts: local (the process asked) or fleet (every gateway on its Redis)")
	fs.IntVar(&f.n, "n", dash.DefaultN, "how many keys per rule and kind")
	fs.DurationVar(&f.every, "every", 2*time.Second, "how often to refresh")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for each answer")
	fs.BoolVar(&f.once, "once", false, "print once, without clearing the screen, and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, topUsage)
		fs.PrintDefaults()
	}
	return fs, f
}

// runTop is `ratekeeper top`: a live view of a proxy's /v1/top.
func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, f := newTopFlags(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := applyEnv(fs, os.LookupEnv, os.Environ()); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("top takes no argument, got %q", fs.Arg(0))}
	case f.admin == "":
		return usageError{errors.New("give --admin URL, the proxy's admin listener")}
	case f.every <= 0:
		return usageError{errors.New("--every must be positive")}
	}
	base, err := baseURL(f.admin)
	if err != nil {
		return usageError{fmt.Errorf("--admin: %w", err)}
	}
	var token string
	if f.tokenFile != "" {
		if token, err = adminauth.Load(f.tokenFile, ""); err != nil {
			return usageError{fmt.Errorf("--token-file: %w", err)}
		}
	}
	q := url.Values{"span": {f.span}, "n": {strconv.Itoa(f.n)}, "scope": {f.scope}}
	if f.rule != "" {
		q.Set("rule", f.rule)
	}
	target := base + dash.TopPath + "?" + q.Encode()
	client := &http.Client{Timeout: f.timeout}
	for {
		ans, err := fetchTop(ctx, client, target, token)
		if err != nil {
			return err
		}
		if !f.once {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear
		}
		printTop(stdout, base, ans, time.Now())
		if f.once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.every):
		}
	}
}

// fetchTop reads one answer of /v1/top.
func fetchTop(ctx context.Context, client *http.Client, target, token string) (dash.TopAnswer, error) {
	var ans dash.TopAnswer
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return ans, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return ans, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return ans, err
	}
	if resp.StatusCode != http.StatusOK {
		return ans, fmt.Errorf("GET %s: %s: %s", req.URL.Path, resp.Status, serverMessage(b))
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return ans, fmt.Errorf("GET %s: %w", req.URL.Path, err)
	}
	return ans, nil
}

// printTop writes one screen: a line per key, then each list's total and
// floor.
func printTop(w io.Writer, base string, ans dash.TopAnswer, now time.Time) {
	scope := ans.Scope
	if ans.Instances > 0 {
		scope += fmt.Sprintf(", %d instances", ans.Instances)
	}
	fmt.Fprintf(w, "ratekeeper top  %s  last %s (%s)  %s\n\n", base, ans.Span, scope, now.Format(time.TimeOnly))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "RULE\tKIND\tKEY\tCOUNT\t±ERROR\t")
	for _, r := range ans.Rules {
		for _, e := range r.Entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t\n", r.Rule, r.Kind, e.Key, e.Count, e.Error)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range ans.Rules {
		fmt.Fprintf(w, "%s %s: %d over %s, each count ± at most %d; a key not listed counted at most %d\n",
			r.Rule, r.Kind, r.Total, r.Span, r.Bound, r.Floor)
	}
}
