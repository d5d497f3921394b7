// Package buildinfo reads what the Go toolchain recorded about the running
// binary (its module version, VCS revision and Go release), so that
// `ratekeeper version` and the ratekeeper_build_info metric say the same.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Unknown is the Revision of a binary built without VCS information (a
// test binary, or -buildvcs=false).
const Unknown = "unknown"

// Info is what a binary knows about its build. The zero value is not
// useful; get one from Read or From.
type Info struct {
	// Version is the main module's version, "(devel)" for a build from a
	// checkout.
	Version string
	// Revision is the VCS revision shortened to 12 characters, or Unknown.
	Revision string
	// Time is the revision's commit time (RFC 3339), or "".
	Time string
	// Modified reports a build from a work tree with uncommitted changes.
	Modified bool
	// GoVersion is the Go release that built the binary (runtime.Version).
	GoVersion string
}

// Read returns the running binary's Info.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi)
}

// From returns the Info that bi records; a nil bi gives what is known
// without it.
func From(bi *debug.BuildInfo) Info {
	i := Info{Version: "(devel)", Revision: Unknown, GoVersion: runtime.Version()}
	if bi == nil {
		return i
	}
	if bi.Main.Version != "" {
		i.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				i.Revision = s.Value[:min(12, len(s.Value))]
			}
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String renders i as one line: "ratekeeper v1.2.3 (revision
// 0123456789ab, modified, 2026-11-23T21:00:00Z) go1.26.8 linux/amd64",
// without the parenthesis when the revision is unknown.
func (i Info) String() string {
	line := "ratekeeper " + i.Version
	if i.Revision != Unknown {
		line += " (revision " + i.Revision
		if i.Modified {
			line += ", modified"
		}
		if i.Time != "" {
			line += ", " + i.Time
		}
		line += ")"
	}
	return line + " " + i.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}
