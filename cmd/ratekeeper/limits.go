package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/server/adminauth"
)

const limitsUsage = `usage: ratekeeper limits list|show|reset [flags] [RULE]

Inspects and resets the counters of a running ratekeeper, without taking
anything from them:

  with --admin URL, a proxy's admin listener (admin_listen):
    list              the rules loaded, their file and store (GET /v1/rules)
    show RULE         the state of the counter RULE keeps for the request
                      that --ip, --method, --path, --host and --header describe
    reset RULE        forget that counter (the proxy's admin.reset, and the
                      token of --token-file)

  with --serve URL, ratekeeper serve's HTTP JSON API:
    list              the limits loaded (GET /v1/config)
    show              the state of --domain's --descriptor counters (POST /v1/peek)
    reset             forget them (serve's --admin-token-file, and --token-file)

A URL may be written host:port, or :port for localhost, meaning http://.
Every flag is also a RATEKEEPER_* variable (--token-file is
RATEKEEPER_TOKEN_FILE). Exit status 1 when the server refuses.

flags:`

// limitsFlags are the flags of ratekeeper limits.
type limitsFlags struct {
	admin, serve, tokenFile        string
	ip, method, path, host, domain string
	timeout                        time.Duration
	headers, descs                 multiFlag
}

// newLimitsFlags returns the flag set of ratekeeper limits op, whose usage
// goes to stderr, and the flags it sets.
func newLimitsFlags(op string, stderr io.Writer) (*flag.FlagSet, *limitsFlags) {
	f := &limitsFlags{}
	fs := flag.NewFlagSet("limits "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.admin, "admin", "", "the proxy's admin listener: `URL` (http://127.0.0.1:9090), or host:port, or :port")
	fs.StringVar(&f.serve, "serve", "", "ratekeeper serve's HTTP JSON API: `URL` (http://127.0.0.1:8080), or host:port, or :port")
	fs.StringVar(&f.tokenFile, "token-file", "", "a `file` holding the bearer token (reset; and reads the server protects)")
	fs.StringVar(&f.ip, "ip", "", "the client's `address` (proxy)")
	fs.StringVar(&f.method, "method", "", "the request's `method` (proxy; default GET)")
	fs.StringVar(&f.path, "path", "", "the request's `path` (proxy; default /)")
	fs.StringVar(&f.host, "host", "", "the request's `host` (proxy)")
	fs.StringVar(&f.domain, "domain", "", "the `domain` (serve)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for the answer")
	fs.Var(&f.headers, "header", "a request header, `'Name: value'` (proxy; repeatable)")
	fs.Var(&f.descs, "descriptor", "a descriptor, `key=value[,key=value...]` (serve; repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, limitsUsage)
		fs.PrintDefaults()
	}
	return fs, f
}

// runLimits is `ratekeeper limits`: a client of the proxy's admin endpoints
// and of serve's JSON API.
func runLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	op, f, positional, err := parseLimits(args, stderr)
	if err != nil {
		return err
	}
	var token string
	if f.tokenFile != "" {
		if token, err = adminauth.Load(f.tokenFile, ""); err != nil {
			return usageError{fmt.Errorf("--token-file: %w", err)}
		}
	}
	var req *http.Request
	if f.admin != "" {
		req, err = f.adminRequest(ctx, op, positional)
	} else {
		req, err = f.serveRequest(ctx, op, positional)
	}
	if err != nil {
		return usageError{err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(&http.Client{Timeout: f.timeout}, req, stdout)
}

// parseLimits reads the operation, the flags (before and after RULE, then
// from the environment) and the positional arguments. -h, --help and help
// print the usage and return flag.ErrHelp.
func parseLimits(args []string, stderr io.Writer) (op string, f *limitsFlags, positional []string, err error) {
	if len(args) > 0 {
		op = args[0]
	}
	fs, f := newLimitsFlags(op, stderr)
	switch op {
	case "list", "show", "reset":
	case "-h", "-help", "--help", "help":
		fs.Usage()
		return "", nil, nil, flag.ErrHelp
	default:
		fs.Usage()
		if op == "" {
			return "", nil, nil, usageError{errors.New("the first argument is list, show or reset")}
		}
		return "", nil, nil, usageError{fmt.Errorf("%q: the first argument is list, show or reset", op)}
	}
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return "", nil, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if _, err := applyEnv(fs, os.LookupEnv, os.Environ()); err != nil {
		return "", nil, nil, err
	}
	if (f.admin == "") == (f.serve == "") {
		return "", nil, nil, usageError{errors.New("give one of --admin URL (a proxy) and --serve URL (ratekeeper serve)")}
	}
	return op, f, positional, nil
}

// adminRequest is the request to the proxy's admin listener for op.
func (f *limitsFlags) adminRequest(ctx context.Context, op string, positional []string) (*http.Request, error) {
	if len(f.descs) > 0 || f.domain != "" {
		return nil, errors.New("--domain and --descriptor are for --serve")
	}
	base, err := baseURL(f.admin)
	if err != nil {
		return nil, fmt.Errorf("--admin: %w", err)
	}
	switch {
	case op == "list" && len(positional) == 0:
		return http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/rules", nil)
	case op == "list":
		return nil, errors.New("limits list takes no argument")
	case len(positional) != 1:
		return nil, fmt.Errorf("limits %s takes one argument, RULE", op)
	}
	q := url.Values{}
	for _, p := range []struct{ name, v string }{{"ip", f.ip}, {"method", f.method}, {"path", f.path}, {"host", f.host}} {
		if p.v != "" {
			q.Set(p.name, p.v)
		}
	}
	for _, h := range f.headers {
		q.Add("header", h)
	}
	target := base + "/v1/rules/" + url.PathEscape(positional[0])
	if op == "show" {
		return http.NewRequestWithContext(ctx, http.MethodGet, target+"/state?"+q.Encode(), nil)
	}
	return http.NewRequestWithContext(ctx, http.MethodPost, target+"/reset?"+q.Encode(), nil)
}

// serveRequest is the request to ratekeeper serve's JSON API for op.
func (f *limitsFlags) serveRequest(ctx context.Context, op string, positional []string) (*http.Request, error) {
	if len(positional) > 0 || len(f.headers) > 0 || f.ip != "" || f.method != "" || f.path != "" || f.host != "" {
		return nil, errors.New("with --serve, describe counters by --domain and --descriptor")
	}
	base, err := baseURL(f.serve)
	if err != nil {
		return nil, fmt.Errorf("--serve: %w", err)
	}
	if op == "list" {
		return http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/config", nil)
	}
	body, err := checkBody(f.domain, f.descs)
	if err != nil {
		return nil, err
	}
	target := base + "/v1/peek"
	if op == "reset" {
		target = base + "/v1/reset"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// baseURL is the server's URL that a flag's value s names, without a
// trailing slash: an http:// or https:// URL, or host:port (http://), or
// :port (http://localhost).
func baseURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		if strings.HasPrefix(s, ":") {
			s = "localhost" + s
		}
		s = "http://" + s
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", err
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%q: the scheme is http or https", u.Scheme)
	case u.Host == "":
		return "", fmt.Errorf("%q names no host", s)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("%q: a URL without a query or fragment", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// send sends req with client and writes the answer, indented, to stdout;
// an answer that is not 2xx is an error with the server's message.
func send(client *http.Client, req *http.Request, stdout io.Writer) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, serverMessage(b))
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, b, "", "  ") == nil {
		b = append(bytes.TrimRight(pretty.Bytes(), "\n"), '\n')
	}
	_, err = stdout.Write(b)
	return err
}

// checkBody is serve's CheckRequest for domain and descriptors written
// key=value,key=value.
func checkBody(domain string, descs []string) ([]byte, error) {
	if domain == "" || len(descs) == 0 {
		return nil, errors.New("give --domain and at least one --descriptor key=value[,key=value...]")
	}
	type entry struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	type desc struct {
		Entries []entry `json:"entries"`
	}
	in := struct {
		Domain      string `json:"domain"`
		Descriptors []desc `json:"descriptors"`
	}{Domain: domain}
	for _, d := range descs {
		var ds desc
		for part := range strings.SplitSeq(d, ",") {
			k, v, _ := strings.Cut(part, "=")
			if k == "" {
				return nil, fmt.Errorf("--descriptor %q: write key=value[,key=value...]", d)
			}
			ds.Entries = append(ds.Entries, entry{k, v})
		}
		in.Descriptors = append(in.Descriptors, ds)
	}
	return json.Marshal(in)
}

// serverMessage is the detail of a problem+json body, the error of a JSON
// error body, or the body itself, cut short.
func serverMessage(b []byte) string {
	var m struct {
		Detail string `json:"detail"`
		Error  string `json:"error"`
	}
	if json.Unmarshal(b, &m) == nil {
		if m.Detail != "" {
			return m.Detail
		}
		if m.Error != "" {
			return m.Error
		}
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

// multiFlag is a flag that may repeat.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, "; ") }
func (m *multiFlag) Set(v string) error {
	*m = append(*m, v)
	return nil
}
