package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/server/buildinfo"
)

// version and --version print the build info's line.
func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 0 || out.String() != buildinfo.Read().String()+"\n" {
			t.Errorf("%v: exit %d, %q %q", args, code, out.String(), errOut.String())
		}
	}
}

// The binary, built from a git checkout as make build and the tests build
// it, names the revision it was built from.
func TestE2EVersion(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not a git checkout")
	}
	// Go stamps a revision only where .git is a directory, so not in a
	// linked work tree (git worktree add), whose .git is a file.
	top, _ := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a linked git work tree: Go does not stamp its revision")
	}
	out, err := exec.Command(binary(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !regexp.MustCompile(`^ratekeeper \S+ \(revision ` + string(head[:12]) + `[,)]`).Match(out) {
		t.Errorf("version %q does not name the revision %s", out, head[:12])
	}
}

// Both servers export ratekeeper_build_info with the values that the same
// binary's `ratekeeper version` prints.
func TestE2EBuildInfo(t *testing.T) {
	out, err := exec.Command(binary(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	m := regexp.MustCompile(`^ratekeeper (\S+) (?:\(revision ([0-9a-f]{12})[,)].* )?(go\S+) `).FindSubmatch(out)
	if m == nil {
		t.Fatalf("version %q", out)
	}
	rev := string(m[2])
	if rev == "" {
		rev = buildinfo.Unknown
	}
	want := fmt.Sprintf(`ratekeeper_build_info{goversion=%q,revision=%q,version=%q} 1`, m[3], rev, m[1])
	proxy := startProxy(t, "upstream: builtin:demo\n")
	if proxy.metric(strings.TrimSuffix(want, " 1")) != 1 {
		t.Errorf("proxy's /metrics lacks %s", want)
	}
	serve := startServe(t, writeConfig(t, t.TempDir(), "rls.yaml", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"))
	if !strings.Contains(serve.metrics(), want+"\n") {
		t.Errorf("serve's /metrics lacks %s", want)
	}
}

// TestGoDirectiveNoNewerThanNeeded: go.mod asks for no newer Go than its
// dependencies do, so that a user on an older release builds it as soon as
// they can build the dependencies. (Today the dependencies need Go 1.26:
// go-redis 9.23, x/net 0.60's HTTP/2 hardening, go-control-plane 1.40's
// unit_multiplier; the code itself compiled and passed its tests on Go
// 1.25.14 with older ones.)
func TestGoDirectiveNoNewerThanNeeded(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var ours string
	for _, line := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			ours = strings.TrimSpace(v)
		}
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{if not .Main}}{{.Path}} {{.GoVersion}}{{end}}", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	need, by := "1.0", ""
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, v, ok := strings.Cut(line, " ")
		if ok && v != "" && goNewer(v, need) {
			need, by = v, path
		}
	}
	if goNewer(ours, need) {
		t.Errorf("go.mod says go %s, but no dependency needs more than %s (%s): lower it so that users on older releases can build", ours, need, by)
	}
}

// goNewer reports whether Go version a (1.26.0, 1.25) is newer than b.
func goNewer(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x > y
		}
	}
	return false
}

func TestGoNewer(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{{"1.26.0", "1.25.5", true}, {"1.26.0", "1.26", false}, {"1.26", "1.26.0", false}, {"1.25.14", "1.26.0", false}, {"1.26.1", "1.26.0", true}, {"1.9", "1.10", false}} {
		if got := goNewer(tt.a, tt.b); got != tt.want {
			t.Errorf("goNewer(%s, %s) = %v", tt.a, tt.b, got)
		}
	}
}
