package main

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// versionLine names the module version, the revision (12 hex digits,
// modified or not) and the Go release.
func TestVersionLine(t *testing.T) {
	info := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T21:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	want := "ratekeeper v1.2.3 (revision 0123456789ab, modified, 2026-11-23T21:00:00Z) " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	if got := versionLine(info); got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := versionLine(nil); !strings.HasPrefix(got, "ratekeeper (devel) go") {
		t.Errorf("without build info: %q", got)
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "ratekeeper ") {
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
	out, err := exec.Command(binary(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !regexp.MustCompile(`^ratekeeper \S+ \(revision ` + string(head[:12]) + `[,)]`).Match(out) {
		t.Errorf("version %q does not name the revision %s", out, head[:12])
	}
}
