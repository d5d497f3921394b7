package archmap

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// layers are the map's packages from the bottom up. A package imports
// packages of its own layer or lower ones only. The names are the first
// column of docs/architecture.md's layer table.
var layers = []struct {
	name string
	pkgs []string
}{
	{"the contract", []string{"ratekeeper"}},
	{"the algorithms", []string{"internal/algo", "internal/topk"}},
	{"the stores", []string{"memstore", "redisstore", "internal/shared", "failsafe", "internal/topfleet"}},
	{"the configuration files", []string{"internal/configerr", "internal/yamlconf", "tlsconfig"}},
	{"the rules", []string{"rules", "internal/jsonmeter"}},
	{"the rate limit fields", []string{"internal/ratefields"}},
	{"the middleware", []string{"httplimit", "promlimit", "grpclimit"}},
	{"the gateway's layers", []string{"gateway/internal/h1", "gateway/internal/upstream", "gateway/internal/fastpath", "gateway/internal/h2", "gateway/internal/problem"}},
	{"the servers' process", []string{"internal/server", "internal/server/metrics", "internal/server/watch", "internal/server/adminauth", "internal/server/buildinfo", "internal/server/tracing", "internal/server/dashboard"}},
	{"the store a server opens", []string{"storeconfig", "internal/server/serverstore"}},
	{"the charts", []string{"sim/chart"}},
	{"the entry points", []string{"gateway", "rls", "sim", "cmd/ratekeeper"}},
}

// TestLayers holds the imports to the layers, and docs/architecture.md's
// layer table to the same layers in the same order.
func TestLayers(t *testing.T) {
	root := moduleRoot(t)
	for _, p := range layerProblems(load(t, root)) {
		t.Error(p)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range layers {
		want = append(want, l.name+": "+strings.Join(slices.Sorted(slices.Values(l.pkgs)), ", "))
	}
	if got := layerTable(string(doc)); !slices.Equal(got, want) {
		t.Errorf("docs/architecture.md's layer table is not internal/archmap's layers:\n got %q\nwant %q", got, want)
	}
}

// TestLayerProblems: an import from a lower layer to a higher one is
// named, as are a package without a layer and a layer's stale name.
func TestLayerProblems(t *testing.T) {
	pkgs := []pkg{
		{ImportPath: module + "/internal/server", Imports: []string{module + "/storeconfig", module + "/internal/server/metrics", "net/http"}},
		{ImportPath: module + "/storeconfig", Imports: []string{module + "/redisstore"}},
		{ImportPath: module + "/internal/new"},
	}
	got := strings.Join(layerProblems(pkgs), "\n")
	for _, want := range []string{
		"internal/server (the servers' process) imports storeconfig (the store a server opens), a higher layer",
		"internal/new has no layer",
		"layers name gateway, which is not a package of the map",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "imports internal/server/metrics") || strings.Contains(got, "imports redisstore") {
		t.Errorf("an import of a lower layer or of the same one is named:\n%s", got)
	}
}

// layerProblems names each import of pkgs that runs up the layers, each
// package without a layer, and each package of layers not in pkgs.
func layerProblems(pkgs []pkg) []string {
	level := map[string]int{}
	for i, l := range layers {
		for _, name := range l.pkgs {
			level[name] = i
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, p := range pkgs {
		from := short(p.ImportPath)
		seen[from] = true
		lf, ok := level[from]
		if !ok {
			out = append(out, from+" has no layer: add it to layers in internal/archmap")
			continue
		}
		for _, imp := range p.Imports {
			to := short(imp)
			if lt, ok := level[to]; ok && strings.HasPrefix(imp, module) && lt > lf {
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s), a higher layer", from, layers[lf].name, to, layers[lt].name))
			}
		}
	}
	for name := range level {
		if !seen[name] {
			out = append(out, "layers name "+name+", which is not a package of the map")
		}
	}
	slices.Sort(out)
	return out
}

// layerTable reads the layer table after "Read it from the bottom" in doc:
// each row as its layer's name and its packages, sorted. Files named in
// the packages' column and the packages the map leaves out are skipped.
func layerTable(doc string) []string {
	_, rest, _ := strings.Cut(doc, "Read it from the bottom")
	name := regexp.MustCompile("`([^`]+)`")
	var rows []string
	started := false
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		cells := strings.Split(line, "|")
		if len(cells) < 4 || cells[1] == " layer " || strings.HasPrefix(cells[1], "---") {
			continue
		}
		var pkgs []string
		for _, m := range name.FindAllStringSubmatch(cells[2], -1) {
			if !strings.HasSuffix(m[1], ".go") && !excluded(m[1]) {
				pkgs = append(pkgs, m[1])
			}
		}
		if len(pkgs) > 0 {
			slices.Sort(pkgs)
			rows = append(rows, strings.TrimSpace(cells[1])+": "+strings.Join(pkgs, ", "))
		}
	}
	return rows
}
