package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// runVersion is `ratekeeper version` (and `ratekeeper --version`): the
// module version and the source revision the binary was built from, as the
// Go toolchain recorded them, and the Go release that built it.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratekeeper version\n\nPrints the module version, the VCS revision and the Go release of this binary.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return usageError{fmt.Errorf("no arguments, not %q", fs.Args())}
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(info))
	return nil
}

// versionLine renders build info as one line: "ratekeeper v1.2.3
// (revision 0123456789ab, modified, 2026-11-23T21:00:00Z) go1.26.8
// linux/amd64". Without build info (a test binary), what is known.
func versionLine(info *debug.BuildInfo) string {
	version := "(devel)"
	var rev, at string
	modified := false
	if info != nil {
		if v := info.Main.Version; v != "" {
			version = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	line := "ratekeeper " + version
	if rev != "" {
		line += " (revision " + rev[:min(12, len(rev))]
		if modified {
			line += ", modified"
		}
		if at != "" {
			line += ", " + at
		}
		line += ")"
	}
	return line + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
