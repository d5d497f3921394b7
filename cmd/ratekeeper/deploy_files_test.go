package main

// Tests of the deployment files against the binary they run
// (dockerfile_test.go, kubernetes_test.go, systemd_test.go): every flag
// they pass is one of the subcommand's, every port and probe is a
// listener's, every config they name loads, and the image's build is the
// one the Dockerfile writes. What they share is here.

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/rls"
)

const repoRoot = "../.."

// flagSet is a subcommand's flags, read from its -h: the name of each, and
// whether it takes a value.
type flagSet map[string]bool

var (
	flagSetsMu sync.Mutex
	flagSets   = map[string]flagSet{}
)

// subcommandFlags runs `bin sub -h` and reads the flags it lists
// (flag.PrintDefaults: "  -name type" for a flag with a value, "  -name"
// for a boolean one).
func subcommandFlags(t *testing.T, bin, sub string) flagSet {
	t.Helper()
	flagSetsMu.Lock()
	defer flagSetsMu.Unlock()
	if fs, ok := flagSets[bin+" "+sub]; ok {
		return fs
	}
	out, err := exec.Command(bin, sub, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s -h: %v\n%s", bin, sub, err, out)
	}
	fs := flagSet{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)( \S+)?$`).FindAllStringSubmatch(string(out), -1) {
		fs[m[1]] = m[2] != ""
	}
	if len(fs) < 3 || !fs["config"] {
		t.Fatalf("%s %s -h lists no --config:\n%s", bin, sub, out)
	}
	flagSets[bin+" "+sub] = fs
	return fs
}

// parseFlags parses args as the subcommand's flag package would: every
// flag must be the subcommand's, and no positional arguments remain. It
// returns each flag's value ("true" for a boolean without one).
func (fs flagSet) parse(args []string) (map[string]string, error) {
	got := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			if name, ok = strings.CutPrefix(a, "-"); !ok || name == "" {
				return nil, fmt.Errorf("%q is not a flag: the servers take no arguments", a)
			}
		}
		name, value, hasValue := strings.Cut(name, "=")
		takesValue, known := fs[name]
		switch {
		case !known:
			return nil, fmt.Errorf("flag provided but not defined: -%s", name)
		case takesValue && !hasValue:
			if i+1 == len(args) {
				return nil, fmt.Errorf("flag needs an argument: -%s", name)
			}
			i++
			value = args[i]
		case !takesValue && !hasValue:
			value = "true"
		}
		if _, dup := got[name]; dup {
			return nil, fmt.Errorf("-%s given twice", name)
		}
		got[name] = value
	}
	return got, nil
}

// listeners are a server's listen addresses by what they serve ("listen",
// "admin" for proxy; "grpc", "http", "admin" for serve), without those
// turned off.
type listeners map[string]string

// proxyListeners are the gateway's: the flags', else the config file's,
// else the defaults.
func proxyListeners(t *testing.T, flags map[string]string, config string) listeners {
	t.Helper()
	c, err := gateway.LoadFile(config)
	if err != nil {
		t.Fatalf("%s: %v", config, err)
	}
	l := listeners{"listen": gateway.DefaultListen}
	for _, v := range []string{c.Listen, flags["listen"]} {
		if v != "" {
			l["listen"] = v
		}
	}
	for _, v := range []string{c.AdminListen, flags["admin-listen"]} {
		if v != "" {
			l["admin"] = v
		}
	}
	return l
}

// serveListeners are the decision service's: the flags', else the
// defaults; "-" turns one off.
func serveListeners(flags map[string]string) listeners {
	l := listeners{}
	for name, def := range map[string]string{"grpc": rls.DefaultGRPCListen, "http": rls.DefaultHTTPListen, "admin": rls.DefaultAdminListen} {
		v := def
		if f, ok := flags[name+"-listen"]; ok {
			v = f
		}
		if v != "-" {
			l[name] = v
		}
	}
	return l
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("listen address %q has no port", addr)
	}
	return n
}

// onAllInterfaces reports whether addr listens beyond loopback, as it must
// in a container.
func onAllInterfaces(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	return err == nil && (h == "" || h == "0.0.0.0" || h == "::")
}

// adminPathAnswers reports whether the admin listener's handler answers
// 200 to GET path.
func adminPathAnswers(path string) bool {
	rec := httptest.NewRecorder()
	metrics.AdminHandler(prometheus.NewRegistry(), nil).ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code == http.StatusOK
}
