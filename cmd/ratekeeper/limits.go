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

	"github.com/ratekeeper/ratekeeper/internal/adminauth"
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

Every flag is also a RATEKEEPER_* variable (--token-file is
RATEKEEPER_TOKEN_FILE). Exit status 1 when the server refuses.

flags:`

// runLimits is `ratekeeper limits`: a client of the proxy's admin endpoints
// and of serve's JSON API.
func runLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, limitsUsage)
		return usageError{errors.New("the first argument is list, show or reset")}
	}
	op := args[0]
	switch op {
	case "list", "show", "reset":
	default:
		fmt.Fprintln(stderr, limitsUsage)
		return usageError{fmt.Errorf("%q: the first argument is list, show or reset", op)}
	}
	fs := flag.NewFlagSet("limits "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		admin     = fs.String("admin", "", "the proxy's admin `URL` (http://127.0.0.1:9090)")
		serve     = fs.String("serve", "", "ratekeeper serve's HTTP JSON API `URL` (http://127.0.0.1:8080)")
		tokenFile = fs.String("token-file", "", "a `file` holding the bearer token (reset; and reads the server protects)")
		ip        = fs.String("ip", "", "the client's `address` (proxy)")
		method    = fs.String("method", "", "the request's `method` (proxy)")
		path      = fs.String("path", "", "the request's `path` (proxy)")
		host      = fs.String("host", "", "the request's `host` (proxy)")
		domain    = fs.String("domain", "", "the `domain` (serve)")
		timeout   = fs.Duration("timeout", 10*time.Second, "how long to wait for the answer")
		headers   multiFlag
		descs     multiFlag
	)
	fs.Var(&headers, "header", "a request header, `'Name: value'` (proxy; repeatable)")
	fs.Var(&descs, "descriptor", "a descriptor, `key=value[,key=value...]` (serve; repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, limitsUsage)
		fs.PrintDefaults()
	}
	// Flags may come before and after RULE.
	var positional []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if _, err := applyEnv(fs, os.LookupEnv, os.Environ()); err != nil {
		return err
	}
	if (*admin == "") == (*serve == "") {
		return usageError{errors.New("give one of --admin URL (a proxy) and --serve URL (ratekeeper serve)")}
	}
	var token string
	if *tokenFile != "" {
		var err error
		if token, err = adminauth.Load(*tokenFile, ""); err != nil {
			return usageError{fmt.Errorf("--token-file: %w", err)}
		}
	}
	client := &http.Client{Timeout: *timeout}
	var req *http.Request
	var err error
	if *admin != "" {
		if len(descs) > 0 || *domain != "" {
			return usageError{errors.New("--domain and --descriptor are for --serve")}
		}
		base := strings.TrimRight(*admin, "/")
		switch {
		case op == "list" && len(positional) == 0:
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/rules", nil)
		case op != "list" && len(positional) == 1:
			q := url.Values{}
			for _, f := range []struct{ name, v string }{{"ip", *ip}, {"method", *method}, {"path", *path}, {"host", *host}} {
				if f.v != "" {
					q.Set(f.name, f.v)
				}
			}
			for _, h := range headers {
				q.Add("header", h)
			}
			target := base + "/v1/rules/" + url.PathEscape(positional[0])
			verb := http.MethodGet
			if op == "show" {
				target += "/state"
			} else {
				target, verb = target+"/reset", http.MethodPost
			}
			req, err = http.NewRequestWithContext(ctx, verb, target+"?"+q.Encode(), nil)
		default:
			return usageError{fmt.Errorf("limits %s takes %s", op, map[bool]string{true: "no argument", false: "one argument, RULE"}[op == "list"])}
		}
	} else {
		if len(positional) > 0 || len(headers) > 0 || *ip != "" || *method != "" || *path != "" || *host != "" {
			return usageError{errors.New("with --serve, describe counters by --domain and --descriptor")}
		}
		base := strings.TrimRight(*serve, "/")
		if op == "list" {
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/config", nil)
		} else {
			body, berr := checkBody(*domain, descs)
			if berr != nil {
				return usageError{berr}
			}
			target := base + "/v1/peek"
			if op == "reset" {
				target = base + "/v1/reset"
			}
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return usageError{err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
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
