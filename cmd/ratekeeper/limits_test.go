package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestLimitsHelp: -h prints the subcommands, their arguments and every
// flag with its meaning, and exits 0; no subcommand prints the same and
// exits 2.
func TestLimitsHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"limits", "-h"}, 0},
		{[]string{"limits", "--help"}, 0},
		{[]string{"limits", "help"}, 0},
		{[]string{"limits", "show", "-h"}, 0},
		{[]string{"limits"}, 2},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), tc.args, &stdout, &stderr); code != tc.code {
			t.Errorf("%q: exit %d, want %d\n%s", tc.args, code, tc.code, stderr.String())
		}
		out := stderr.String()
		for _, want := range []string{
			"list", "show RULE", "reset RULE",
			"-admin URL", "host:port", "-serve URL", "-token-file file", "bearer token",
			"-ip address", "-method method", "-path path", "-host host", "-header 'Name: value'",
			"-domain domain", "-descriptor key=value", "-timeout", "how long",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%q: the usage lacks %q:\n%s", tc.args, want, out)
			}
		}
	}
}

// TestLimitsAddressWithoutScheme: --admin and --serve take host:port and
// :port for http://host:port, as admin_listen and --http-listen write
// them.
func TestLimitsAddressWithoutScheme(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"rules": []}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	_, port, _ := strings.Cut(u.Host, ":")
	for _, tc := range []struct{ flag, addr, want string }{
		{"--admin", u.Host, "GET /v1/rules"},
		{"--admin", "localhost:" + port, "GET /v1/rules"},
		{"--admin", ":" + port, "GET /v1/rules"},
		{"--admin", u.Host + "/", "GET /v1/rules"},
		{"--serve", u.Host, "GET /v1/config"},
	} {
		got = nil
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"limits", "list", tc.flag, tc.addr}, &stdout, &stderr); code != 0 || len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s %s: exit %d, served %q, want %q\n%s", tc.flag, tc.addr, code, got, tc.want, stderr.String())
		}
	}
}

func TestLimitsBaseURL(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"localhost:9090", "http://localhost:9090", ""},
		{":9090", "http://localhost:9090", ""},
		{"127.0.0.1:9090/", "http://127.0.0.1:9090", ""},
		{"[::1]:9090", "http://[::1]:9090", ""},
		{"admin.internal", "http://admin.internal", ""},
		{"http://h:1/", "http://h:1", ""},
		{"https://h:1/rk/", "https://h:1/rk", ""},
		{"ftp://h:1", "", "the scheme is http or https"},
		{"HTTP://h:1", "http://h:1", ""},
		{"http://", "", "names no host"},
		{"://h", "", "missing protocol scheme"},
		{"h:1?x=y", "", "without a query"},
		{"h:1#f", "", "without a query or fragment"},
		{"h:port", "", "invalid port"},
		{"h :1", "", "invalid character"},
		{"h:1\r\nX: y", "", "invalid control character"},
	} {
		got, err := baseURL(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("baseURL(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}
