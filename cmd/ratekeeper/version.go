package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/ratekeeper/ratekeeper/internal/server/buildinfo"
)

// runVersion is `ratekeeper version` (and `ratekeeper --version`). It
// prints the module version and the source revision the binary was built
// from, as the Go toolchain recorded them, and the Go release that built
// it: the values of the ratekeeper_build_info metric.
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
	fmt.Fprintln(stdout, buildinfo.Read())
	return nil
}
