package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/buildinfo"
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
