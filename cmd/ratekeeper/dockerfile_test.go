package main

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/rls"
)

// dockerfile is the parsed Dockerfile: its global ARGs and its stages.
type dockerfile struct {
	args   map[string]string
	stages []*stage
}

type stage struct {
	name, from string
	workdir    string
	args, env  map[string]string
	runs       []string
	copies     [][]string // each COPY's words
	user       string
	expose     []string
	entrypoint []string
	cmd        []string
}

func parseDockerfile(t *testing.T, text string) *dockerfile {
	t.Helper()
	d := &dockerfile{args: map[string]string{}}
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	var st *stage
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			w := strings.Fields(rest)
			st = &stage{args: map[string]string{}, env: map[string]string{}}
			for i := 0; i < len(w); i++ {
				switch {
				case strings.HasPrefix(w[i], "--"):
				case strings.EqualFold(w[i], "AS") && i+1 < len(w):
					st.name = w[i+1]
					i++
				default:
					st.from = w[i]
				}
			}
			d.stages = append(d.stages, st)
			continue
		}
		if st == nil {
			if instr == "ARG" {
				for _, a := range strings.Fields(rest) {
					k, v, _ := strings.Cut(a, "=")
					d.args[k] = v
				}
				continue
			}
			t.Fatalf("Dockerfile: %s before FROM", instr)
		}
		switch instr {
		case "WORKDIR":
			st.workdir = rest
		case "ARG":
			for _, a := range strings.Fields(rest) {
				k, v, _ := strings.Cut(a, "=")
				st.args[k] = v
			}
		case "ENV":
			for _, a := range strings.Fields(rest) {
				k, v, ok := strings.Cut(a, "=")
				if !ok {
					t.Fatalf("Dockerfile: ENV %s: write ENV KEY=VALUE", rest)
				}
				st.env[k] = v
			}
		case "RUN":
			st.runs = append(st.runs, rest)
		case "COPY":
			st.copies = append(st.copies, strings.Fields(rest))
		case "USER":
			st.user = rest
		case "EXPOSE":
			st.expose = append(st.expose, strings.Fields(rest)...)
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				t.Fatalf("Dockerfile: %s %s: use the exec (JSON) form: %v", instr, rest, err)
			}
			if instr == "CMD" {
				st.cmd = v
			} else {
				st.entrypoint = v
			}
		}
	}
	if len(d.stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a builder and a runtime stage", len(d.stages))
	}
	return d
}

// shellWords splits a RUN line as sh would for a simple command: quotes,
// backslashes, and $VAR or ${VAR} expanded from vars (an unknown variable
// is an error, not an empty word). Operators (&&, ;, |) are refused: the
// test runs one command.
func shellWords(s string, vars map[string]string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	expand := func(i int) (int, error) {
		j, name := i+1, ""
		if j < len(s) && s[j] == '{' {
			end := strings.IndexByte(s[j:], '}')
			if end < 0 {
				return 0, fmt.Errorf("unclosed ${ in %q", s)
			}
			name, j = s[j+1:j+end], j+end+1
		} else {
			for j < len(s) && (s[j] == '_' || 'A' <= s[j] && s[j] <= 'Z' || 'a' <= s[j] && s[j] <= 'z' || '0' <= s[j] && s[j] <= '9') {
				j++
			}
			name = s[i+1 : j]
		}
		v, ok := vars[name]
		if !ok {
			return 0, fmt.Errorf("$%s is not an ARG or ENV of the stage", name)
		}
		w.WriteString(v)
		return j, nil
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
			i++
		case c == '&' || c == ';' || c == '|':
			return nil, fmt.Errorf("%q: one command per RUN, please", s)
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+end])
			i, inWord = i+end+2, true
		case c == '"':
			inWord = true
			i++
			for i < len(s) && s[i] != '"' {
				switch {
				case s[i] == '\\' && i+1 < len(s):
					w.WriteByte(s[i+1])
					i += 2
				case s[i] == '$':
					var err error
					if i, err = expand(i); err != nil {
						return nil, err
					}
				default:
					w.WriteByte(s[i])
					i++
				}
			}
			if i == len(s) {
				return nil, fmt.Errorf(`unclosed " in %q`, s)
			}
			i++
		case c == '\\' && i+1 < len(s):
			w.WriteByte(s[i+1])
			i, inWord = i+2, true
		case c == '$':
			var err error
			if i, err = expand(i); err != nil {
				return nil, err
			}
			inWord = true
		default:
			w.WriteByte(c)
			i, inWord = i+1, true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// imageBuild is the builder's go build, as the Dockerfile writes it.
type imageBuild struct {
	env  []string // KEY=VALUE, the stage's ENV and the command's own
	args []string // after "go"
	out  string   // its -o
}

// goBuild finds the one RUN of a go build in the Dockerfile's stages, on
// the platform this test runs on (as docker build would give TARGETOS and
// TARGETARCH).
func (d *dockerfile) goBuild(t *testing.T) (*stage, imageBuild) {
	t.Helper()
	for _, st := range d.stages {
		for _, run := range st.runs {
			if !strings.Contains(run, "go build") {
				continue
			}
			vars := map[string]string{"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH, "BUILDPLATFORM": runtime.GOOS + "/" + runtime.GOARCH}
			for k, v := range d.args {
				vars[k] = v
			}
			for k, v := range st.args {
				if _, set := vars[k]; !set || v != "" {
					vars[k] = v
				}
			}
			var b imageBuild
			for k, v := range st.env {
				vars[k] = v
				b.env = append(b.env, k+"="+v)
			}
			words, err := shellWords(run, vars)
			if err != nil {
				t.Fatalf("Dockerfile: RUN %s: %v", run, err)
			}
			for len(words) > 0 && strings.HasPrefix(words[0], "--") { // --mount=..., --network=...
				words = words[1:]
			}
			for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
				b.env, words = append(b.env, words[0]), words[1:]
			}
			if len(words) < 2 || words[0] != "go" || words[1] != "build" {
				t.Fatalf("Dockerfile: RUN %s: want [--mount...] [ENV=...] go build ...", run)
			}
			b.args = words[1:]
			for i, a := range b.args {
				if a == "-o" && i+1 < len(b.args) {
					b.out = b.args[i+1]
				}
			}
			if b.out == "" {
				t.Fatalf("Dockerfile: %s: no -o", run)
			}
			return st, b
		}
	}
	t.Fatal("Dockerfile: no RUN with go build")
	return nil, imageBuild{}
}

// TestDockerfile runs the Dockerfile's go build here, exactly (its flags,
// its environment, its package), and checks what the image would hold: a
// static binary that runs `version`, and runs `check` on the config the
// default command names; a numeric non-root USER; the EXPOSEd ports those
// the servers listen on by default; a .dockerignore that leaves in every
// file the build needs.
func TestDockerfile(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	d := parseDockerfile(t, string(text))
	builder, b := d.goBuild(t)
	final := d.stages[len(d.stages)-1]
	if final == builder {
		t.Fatal("Dockerfile: the go build runs in the last stage: the image would hold the toolchain")
	}
	if builder.workdir == "" || !slices.ContainsFunc(builder.copies, func(c []string) bool { return slices.Equal(c, []string{".", "."}) }) {
		t.Fatal("Dockerfile: the builder should COPY . . into its WORKDIR, which the test takes as the repository's root")
	}

	// The build, as the Dockerfile runs it; its -o moved to a temp dir.
	bin := filepath.Join(t.TempDir(), "ratekeeper")
	args := slices.Clone(b.args)
	args[slices.Index(args, "-o")+1] = bin
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	// The golang image sets no GOFLAGS; this machine's must not change the build.
	cmd.Env = append(append(os.Environ(), "GOFLAGS="), b.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s go %s: %v\n%s", strings.Join(b.env, " "), strings.Join(b.args, " "), err, out)
	}
	t.Logf("built: %q go %q", b.env, b.args)
	checkStatic(t, bin)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// (With -trimpath, Go records no -ldflags: checkStatic saw -s -w.)
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings %v: want CGO_ENABLED=0 and -trimpath", settings)
	}
	if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "ratekeeper ") {
		t.Errorf("version: %v %s", err, out)
	}

	// The runtime stage: the binary copied from the builder's -o, run by
	// ENTRYPOINT, with CMD's flags.
	copied := map[string]string{} // destination in the image -> source
	var binInImage string
	for _, c := range final.copies {
		from := ""
		var paths []string
		for _, w := range c {
			if f, ok := strings.CutPrefix(w, "--from="); ok {
				from = f
			} else if !strings.HasPrefix(w, "--") {
				paths = append(paths, w)
			}
		}
		if len(paths) != 2 {
			t.Fatalf("Dockerfile: COPY %v: want one source and one destination", c)
		}
		if from == builder.name && paths[0] == b.out {
			binInImage = paths[1]
		} else if from == "" {
			copied[paths[1]] = paths[0]
		}
	}
	if binInImage == "" || !slices.Equal(final.entrypoint, []string{binInImage}) {
		t.Fatalf("Dockerfile: ENTRYPOINT %q, want the binary copied from %s:%s (%q)", final.entrypoint, builder.name, b.out, binInImage)
	}
	if len(final.cmd) == 0 || final.cmd[0] != "proxy" {
		t.Fatalf("Dockerfile: CMD %q: want proxy --config ...", final.cmd)
	}
	flags, err := subcommandFlags(t, bin, "proxy").parse(final.cmd[1:])
	if err != nil {
		t.Fatalf("Dockerfile: CMD %q: %v", final.cmd, err)
	}
	src, ok := copied[flags["config"]]
	if !ok {
		t.Fatalf("Dockerfile: CMD's --config %s is not a file the image COPYs from the repository", flags["config"])
	}
	config := filepath.Join(repoRoot, src)
	if out, err := exec.Command(bin, "check", "--config", config).CombinedOutput(); err != nil {
		t.Errorf("check --config %s (the image's %s): %v\n%s", src, flags["config"], err, out)
	}

	// USER: numeric (Kubernetes' runAsNonRoot can only verify a number),
	// not root.
	uid, gid, _ := strings.Cut(final.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("Dockerfile: USER %q: want a numeric non-root uid", final.user)
	}
	if _, err := strconv.Atoi(gid); gid != "" && err != nil {
		t.Errorf("Dockerfile: USER %q: want a numeric gid", final.user)
	}

	// EXPOSE: the ports of both servers' default listeners, which the
	// image's config uses on all interfaces.
	want := map[int]bool{}
	for _, a := range []string{gateway.DefaultListen, rls.DefaultGRPCListen, rls.DefaultHTTPListen, rls.DefaultAdminListen} {
		want[port(t, a)] = true
	}
	got := map[int]bool{}
	for _, e := range final.expose {
		p, err := strconv.Atoi(strings.TrimSuffix(e, "/tcp"))
		if err != nil {
			t.Fatalf("Dockerfile: EXPOSE %s", e)
		}
		got[p] = true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Dockerfile: EXPOSE %v, want the default listeners' ports %v", final.expose, want)
	}
	for what, addr := range proxyListeners(t, flags, config) {
		if !got[port(t, addr)] || !onAllInterfaces(addr) {
			t.Errorf("the image's %s listens on %s: want an EXPOSEd port on all interfaces", what, addr)
		}
	}
	checkDockerignore(t, slices.Collect(func(yield func(string) bool) {
		for _, s := range copied {
			if !yield(s) {
				return
			}
		}
	}))
}

// checkStatic fails unless bin is a static executable: no interpreter, no
// shared library, and stripped (-s -w).
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
	for _, s := range f.Sections {
		if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") {
			t.Errorf("the binary has %s: not built with -ldflags '-s -w'", s.Name)
		}
	}
}

// checkDockerignore fails when .dockerignore leaves out a file the image's
// build needs: go.mod, go.sum, the Go and embedded files of the packages
// cmd/ratekeeper imports from this module, and the files extra COPYs name.
func checkDockerignore(t *testing.T, extra []string) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(text), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf(".dockerignore: %s: exceptions are not checked here", l)
			}
			patterns = append(patterns, path.Clean(strings.TrimPrefix(l, "/")))
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(repoRoot)
	needed := append([]string{"go.mod", "go.sum"}, extra...)
	for _, f := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(root, f); err == nil && !strings.HasPrefix(rel, "..") {
			needed = append(needed, filepath.ToSlash(rel))
		}
	}
	if len(needed) < 20 {
		t.Fatalf("go list found %d files of the module", len(needed))
	}
	for _, f := range needed {
		for p := f; p != "."; p = path.Dir(p) {
			for _, pat := range patterns {
				if ok, _ := path.Match(pat, p); ok {
					t.Errorf(".dockerignore: %s leaves out %s, which the image's build needs", pat, f)
				}
			}
		}
	}
}
