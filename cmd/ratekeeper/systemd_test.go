package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/server"
)

// unitFile is a systemd unit's settings by section and key; a key set
// twice keeps both values.
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, file string) unitFile {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" || strings.HasSuffix(l, `\`) {
				t.Fatalf("%s:%d: %q is not KEY=VALUE in a section (continuations are not parsed here)", file, n, l)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// get is a key's last value in [Service].
func (u unitFile) get(key string) string {
	v := u["Service"][key]
	if len(v) == 0 {
		return "\x00unset"
	}
	return v[len(v)-1]
}

// TestSystemdUnits holds deploy/systemd's units to the binary: ExecStart
// runs proxy or serve with its own flags, a --config under the
// ConfigurationDirectory (the gateway's example file passes `check`), and
// listeners that two units on one machine do not share; SIGHUP reloads;
// stopping waits out the shutdown timeout; the sandbox is there. With
// systemd-analyze on the machine, the units verify without a warning.
func TestSystemdUnits(t *testing.T) {
	bin := binary(t)
	units, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "systemd", "*.service"))
	if err != nil || len(units) < 2 {
		t.Fatalf("units %v: %v", units, err)
	}
	ports := map[int]string{}
	for _, file := range units {
		name := filepath.Base(file)
		u := parseUnit(t, file)
		sandbox := map[string]string{
			"Type": "exec", "DynamicUser": "yes", "ConfigurationDirectory": "ratekeeper",
			"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
			"NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
			"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "MemoryDenyWriteExecute": "yes",
			"LockPersonality": "yes", "RestrictNamespaces": "yes", "SystemCallArchitectures": "native",
			"ExecReload": "/bin/kill -HUP $MAINPID",
		}
		for k, want := range sandbox {
			if got := u.get(k); got != want {
				t.Errorf("%s: %s=%q, want %q", name, k, got, want)
			}
		}
		if !slices.Contains(u["Service"]["SystemCallFilter"], "@system-service") {
			t.Errorf("%s: no SystemCallFilter=@system-service", name)
		}
		if d, err := time.ParseDuration(u.get("TimeoutStopSec")); err != nil || d <= server.DefaultShutdownTimeout {
			t.Errorf("%s: TimeoutStopSec=%s: want more than the shutdown timeout, %v", name, u.get("TimeoutStopSec"), server.DefaultShutdownTimeout)
		}

		exe := strings.Fields(u.get("ExecStart"))
		if len(exe) < 2 || path.Base(exe[0]) != "ratekeeper" || !strings.Contains(name, exe[1]) {
			t.Fatalf("%s: ExecStart=%s: want ratekeeper %s ...", name, u.get("ExecStart"), strings.TrimSuffix(strings.TrimPrefix(name, "ratekeeper-"), ".service"))
		}
		flags, err := subcommandFlags(t, bin, exe[1]).parse(exe[2:])
		if err != nil {
			t.Fatalf("%s: ExecStart: %v", name, err)
		}
		config := flags["config"]
		if !strings.HasPrefix(config, "/etc/ratekeeper/") {
			t.Errorf("%s: --config %s is outside the ConfigurationDirectory /etc/ratekeeper", name, config)
		}
		var l listeners
		if exe[1] == "proxy" {
			example := filepath.Join(repoRoot, "deploy", "systemd", path.Base(config))
			if out, err := exec.Command(bin, "check", "--config", example).CombinedOutput(); err != nil {
				t.Errorf("%s: check --config %s (installed as %s): %v\n%s", name, example, config, err, out)
			}
			l = proxyListeners(t, flags, example)
		} else {
			l = serveListeners(flags)
		}
		for what, addr := range l {
			p := port(t, addr)
			if other, ok := ports[p]; ok {
				t.Errorf("%s: %s listens on port %d, as %s does", name, what, p, other)
			}
			ports[p] = name + "'s " + what
		}
		verifyUnit(t, file, exe[0], bin)
	}
}

// verifyUnit runs systemd-analyze verify on a copy of the unit whose
// ExecStart runs bin (verify wants the executable to exist), and fails on
// any warning about the unit.
func verifyUnit(t *testing.T, file, exe, bin string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze here: the units are parsed only")
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), filepath.Base(file))
	if err := os.WriteFile(cp, bytes.ReplaceAll(b, []byte(exe), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", cp).CombinedOutput()
	var warnings []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, filepath.Base(file)) {
			warnings = append(warnings, l)
		}
	}
	if err != nil || len(warnings) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(file), err, strings.Join(warnings, "\n"))
	}
}
