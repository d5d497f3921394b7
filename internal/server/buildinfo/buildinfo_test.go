package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// From takes the module version, the revision (12 characters, modified or
// not) and the Go release; String renders them as `ratekeeper version`
// prints them.
func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-23T21:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	i := From(bi)
	want := Info{Version: "v1.2.3", Revision: "0123456789ab", Time: "2026-11-23T21:00:00Z", Modified: true, GoVersion: runtime.Version()}
	if i != want {
		t.Errorf("%+v, want %+v", i, want)
	}
	line := "ratekeeper v1.2.3 (revision 0123456789ab, modified, 2026-11-23T21:00:00Z) " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	if got := i.String(); got != line {
		t.Errorf("%q, want %q", got, line)
	}
	for _, bi := range []*debug.BuildInfo{nil, {}} {
		i := From(bi)
		if i.Version != "(devel)" || i.Revision != Unknown || i.GoVersion != runtime.Version() {
			t.Errorf("From(%v) = %+v", bi, i)
		}
		if got := i.String(); !strings.HasPrefix(got, "ratekeeper (devel) go") {
			t.Errorf("without build info: %q", got)
		}
	}
}
