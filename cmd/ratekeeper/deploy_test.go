package main

// Tests of deploy/: the Grafana dashboard and the Prometheus alerts may
// name only metrics that ratekeeper proxy and ratekeeper serve export, and
// each file must load where it is meant to.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/internal/configerr"
	"github.com/ratekeeper/ratekeeper/internal/yamlconf"
	"github.com/ratekeeper/ratekeeper/rls"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

const (
	dashboardFile = "../../deploy/grafana/ratekeeper.json"
	alertsFile    = "../../deploy/prometheus/alerts.yml"
)

// deadRedis is a Redis that refuses every connection, so that the servers
// run their failure policy, its breaker and the Redis store's collectors.
const deadRedis = "redis://127.0.0.1:1/0"

// byPrometheus are the series Prometheus makes itself for each target.
var byPrometheus = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

// TestDeployNamesExportedMetrics extracts every metric name from the
// dashboard's queries (its panels' and its variables') and the alerts'
// expressions and checks each against what a real gateway and a real
// decision service, run in this process, expose on their admin /metrics
// after a few decisions: allowed, refused, shadow, queued, and fallbacks
// while Redis is down. A histogram is named with _bucket, _sum or _count.
func TestDeployNamesExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)

	// Every ratekeeper_ family the code declares was scraped: a family
	// without samples would be missing from /metrics, and the check below
	// would then refuse a query that is right.
	for _, n := range declaredMetrics(t) {
		if _, ok := exported[n]; !ok {
			t.Errorf("the code declares %s but the servers did not expose it: drive what it counts in exportedMetrics", n)
		}
	}

	exprs := dashboardExprs(t)
	for _, r := range alertRules(t) {
		exprs = append(exprs, located{"alert " + r.Alert, r.Expr})
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names, err := metricNames(e.expr)
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", e.where, e.expr)
		}
		for _, n := range names {
			used[n] = true
			if err := checkName(n, exported); err != nil {
				t.Errorf("%s: %v", e.where, err)
			}
		}
	}
	t.Logf("metrics used: %v", slices.Sorted(func(yield func(string) bool) {
		for n := range used {
			if !yield(n) {
				return
			}
		}
	}))
}

// checkName says why n names no series of exported (name to TYPE).
func checkName(n string, exported map[string]string) error {
	if typ, ok := exported[n]; ok {
		if typ == "histogram" || typ == "summary" {
			return fmt.Errorf("%s is a %s: query %[1]s_bucket, _sum or _count", n, typ)
		}
		return nil
	}
	if slices.Contains(byPrometheus, n) {
		return nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(n, suffix)
		if !ok {
			continue
		}
		switch exported[base] {
		case "histogram":
			return nil
		case "summary":
			if suffix != "_bucket" {
				return nil
			}
		}
	}
	return fmt.Errorf("%s is not a metric that ratekeeper proxy or serve exports", n)
}

// TestMetricNames: what metricNames takes for a metric name and what not.
func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up{job=~"ratekeeper.*"} == 0`, []string{"up"}},
		{`sum by (job, rule) (rate(a_total{result="limited",x="by (y)"}[$__rate_interval])) / ignoring(result) group_left sum(b) > 0.25`, []string{"a_total", "b"}},
		{`histogram_quantile(0.99, sum by (le, op) (rate(h_bucket{job=~"$job"}[5m]))) and on (job) c offset 1d > 1e3`, []string{"h_bucket", "c"}},
		{`time() - g{instance=~"$instance"} or vector(0) unless bool d AND e`, []string{"g", "d", "e"}},
		{`label_values(ratekeeper_build_info{job=~"$job"}, instance)`, []string{"ratekeeper_build_info"}},
		{`label_values(job)`, nil},
	} {
		got, err := metricNames(c.expr)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %q, %v; want %q", c.expr, got, err, c.want)
		}
	}
	for _, bad := range []string{`sum(rate(x[5m])`, `a{b="c"`, `{__name__="f"}`} {
		if names, err := metricNames(bad); err == nil && len(names) > 0 {
			t.Errorf("metricNames(%q) = %q, want an error or nothing", bad, names)
		}
	}
}

var (
	promString   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promGrouping = regexp.MustCompile(`(?i)\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promOffset   = regexp.MustCompile(`(?i)\boffset\s+-?\w+`)
	grafanaVar   = regexp.MustCompile(`\$\{?\w+\}?`)
	promToken    = regexp.MustCompile(`(?i)(0x[0-9a-f]+|[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?|\.[0-9]+)|([a-z_:][a-z0-9_:]*)`)
	labelValues  = regexp.MustCompile(`^\s*label_values\((.*)\)\s*$`)
)

// promKeywords are PromQL's words that are not metric names.
var promKeywords = []string{"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "inf", "nan"}

// metricNames returns, in order, the metric names a PromQL expression (or
// a Grafana label_values query) selects. It is not a PromQL parser: it
// drops strings, label matchers, ranges, grouping clauses, offsets and
// Grafana variables, and then takes every identifier that is not a
// keyword and not a function's name. A selector by __name__ is not
// understood; unbalanced brackets are an error.
func metricNames(expr string) ([]string, error) {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		// label_values(label) or label_values(selector, label)
		i := strings.LastIndex(m[1], ",")
		if i < 0 {
			return nil, nil
		}
		expr = m[1][:i]
	}
	s := promString.ReplaceAllString(expr, `""`)
	for _, p := range [][2]string{{"(", ")"}, {"[", "]"}, {"{", "}"}} {
		if strings.Count(s, p[0]) != strings.Count(s, p[1]) {
			return nil, fmt.Errorf("unbalanced %s%s in %q", p[0], p[1], expr)
		}
	}
	if strings.Contains(s, "__name__") {
		return nil, fmt.Errorf("a selector by __name__ is not understood: %q", expr)
	}
	s = promRange.ReplaceAllString(s, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = promOffset.ReplaceAllString(s, " ")
	s = grafanaVar.ReplaceAllString(s, " ")
	var names []string
	for _, m := range promToken.FindAllStringSubmatchIndex(s, -1) {
		if m[4] < 0 { // a number
			continue
		}
		word := s[m[4]:m[5]]
		if slices.Contains(promKeywords, strings.ToLower(word)) {
			continue
		}
		if rest := strings.TrimLeft(s[m[5]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		if !slices.Contains(names, word) {
			names = append(names, word)
		}
	}
	return names, nil
}

// located is an expression and where it was found.
type located struct{ where, expr string }

// dashboard is what the tests read of a Grafana dashboard.
type dashboard struct {
	Title      string
	UID        string
	Templating struct {
		List []struct {
			Type, Name string
			Query      json.RawMessage
			Datasource *datasource
		}
	}
	Panels []panel
}

type panel struct {
	ID         int
	Type       string
	Title      string
	Datasource *datasource
	GridPos    struct{ X, Y, W, H int }
	Targets    []struct {
		Expr         string
		LegendFormat string
		RefID        string `json:"refId"`
		Datasource   *datasource
	}
	FieldConfig struct {
		Defaults struct{ Unit string }
	} `json:"fieldConfig"`
	Options struct {
		Legend *struct {
			DisplayMode string `json:"displayMode"`
			ShowLegend  bool   `json:"showLegend"`
		}
	}
	Panels []panel // a collapsed row's
}

type datasource struct{ Type, UID string }

// readDashboard decodes the dashboard; unknown fields are fine (Grafana
// has many), JSON that does not decode is not.
func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// dashboardExprs returns the queries of the dashboard's panels and
// variables.
func dashboardExprs(t *testing.T) []located {
	t.Helper()
	d := readDashboard(t)
	var out []located
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if json.Unmarshal(v.Query, &q) != nil {
			json.Unmarshal(v.Query, &q.Query) // older dashboards: a string
		}
		if q.Query == "" {
			t.Errorf("variable %s: no query in %s", v.Name, v.Query)
			continue
		}
		out = append(out, located{"variable " + v.Name, q.Query})
	}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out = append(out, located{fmt.Sprintf("panel %q %s", p.Title, tg.RefID), tg.Expr})
		}
	}
	return out
}

// allPanels flattens collapsed rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// TestDashboard: the dashboard chooses its Prometheus data source by a
// variable, and each panel queries through it, has a unit, a legend that
// names its series, a unique id and a place on the 24-column grid.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both are needed to import and link it", d.Title, d.UID)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"prometheus"` {
			hasDS = true
		} else if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s does not query ${datasource}", v.Name)
		}
	}
	if !hasDS {
		t.Error("no datasource variable of type prometheus")
	}
	ids := map[int]bool{}
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d taken", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not query ${datasource}", p.Title)
		}
		if p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("panel %q has no unit", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: query %q (refId %q) without an expression, a refId or ${datasource}", p.Title, tg.Expr, tg.RefID)
			}
			if p.Type == "timeseries" && tg.LegendFormat == "" {
				t.Errorf("panel %q: %q has no legendFormat", p.Title, tg.Expr)
			}
		}
		if p.Type == "timeseries" && (p.Options.Legend == nil || !p.Options.Legend.ShowLegend) {
			t.Errorf("panel %q shows no legend", p.Title)
		}
	}
}

// alertFile is Prometheus's rule file format, as much as alerts use.
type alertFile struct {
	Groups []struct {
		Name     string      `yaml:"name"`
		Interval string      `yaml:"interval"`
		Rules    []alertRule `yaml:"rules"`
	} `yaml:"groups"`
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// promDuration is Prometheus's duration syntax.
var promDuration = regexp.MustCompile(`^(?:[0-9]+(?:ms|[smhdwy]))+$`)

// alertRules decodes the alert file strictly and checks each rule for
// what Prometheus needs and what an on-call engineer needs: a name, an
// expression, a for, a severity, a summary, a description and a runbook
// that exists in docs/.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f alertFile
	var rules []alertRule
	_, err = yamlconf.Decode(alertsFile, b, &f, func() []*configerr.Error {
		var errs []*configerr.Error
		bad := func(field, format string, args ...any) {
			errs = append(errs, &configerr.Error{Field: field, Err: fmt.Errorf(format, args...)})
		}
		if len(f.Groups) == 0 {
			bad("groups", "no group")
		}
		names := map[string]bool{}
		for i, g := range f.Groups {
			at := fmt.Sprintf("groups[%d]", i)
			if g.Name == "" {
				bad(at+".name", "is missing")
			}
			if len(g.Rules) == 0 {
				bad(at+".rules", "no rule")
			}
			for j, r := range g.Rules {
				at := fmt.Sprintf("%s.rules[%d]", at, j)
				switch {
				case r.Alert == "":
					bad(at+".alert", "is missing")
				case names[r.Alert]:
					bad(at+".alert", "%s is taken", r.Alert)
				}
				names[r.Alert] = true
				if strings.TrimSpace(r.Expr) == "" {
					bad(at+".expr", "is missing")
				}
				if !promDuration.MatchString(r.For) {
					bad(at+".for", "%q is not a Prometheus duration", r.For)
				}
				if s := r.Labels["severity"]; s != "warning" && s != "critical" {
					bad(at+".labels.severity", "%q is not warning or critical", s)
				}
				for _, k := range []string{"summary", "description", "runbook_url"} {
					if r.Annotations[k] == "" {
						bad(at+".annotations."+k, "is missing")
					}
				}
				if err := docExists(r.Annotations["runbook_url"]); err != nil {
					bad(at+".annotations.runbook_url", "%v", err)
				}
				rules = append(rules, r)
			}
		}
		return errs
	})
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// TestAlertRules: the alert file decodes strictly, with what Prometheus
// and an on-call engineer need (see alertRules), and covers what a
// platform team asked for.
func TestAlertRules(t *testing.T) {
	var names []string
	for _, r := range alertRules(t) {
		names = append(names, r.Alert)
	}
	for _, want := range []string{"RatekeeperTargetDown", "RatekeeperStoreErrors", "RatekeeperStoreFallback", "RatekeeperStoreBreakerOpen", "RatekeeperConfigReloadFailing", "RatekeeperRefusalRatioSpike"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s", want)
		}
	}
}

// docLink is a runbook in this repository's docs.
var docLink = regexp.MustCompile(`^https://github\.com/ratekeeper/ratekeeper/blob/main/(docs/[a-z]+\.md)(?:#([a-z0-9_-]+))?$`)

// docExists checks that url is a page of docs/ and its anchor a heading
// of it (as GitHub makes anchors: lower case, punctuation dropped, spaces
// as hyphens).
func docExists(url string) error {
	m := docLink.FindStringSubmatch(url)
	if m == nil {
		return fmt.Errorf("%q is not a page of docs/ on GitHub", url)
	}
	b, err := os.ReadFile(filepath.Join("../..", m[1]))
	if err != nil {
		return err
	}
	if m[2] == "" {
		return nil
	}
	punct := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			if strings.ReplaceAll(punct.ReplaceAllString(strings.ToLower(h), ""), " ", "-") == m[2] {
				return nil
			}
		}
	}
	return fmt.Errorf("%s has no heading #%s", m[1], m[2])
}

// declaredMetrics lists the ratekeeper_ metric names declared in the
// module's code (prometheus options' Name and NewDesc).
func declaredMetrics(t *testing.T) []string {
	t.Helper()
	decl := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(ratekeeper_[a-z0-9_]+)"`)
	var names []string
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || d.Name() == "examples" || d.Name() == "tools" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metric declarations: %v", len(names), names)
	}
	return names
}

// exportedMetrics runs a gateway and a decision service in this process,
// both on a Redis that is down (so that the on_error policy, its breaker
// and the Redis store's collectors report), drives a few decisions through
// each, and returns the families on their /metrics with their types.
func exportedMetrics(t *testing.T) map[string]string {
	// As the commands do (and go-redis's logger is the process's): its
	// failed dials go to a logger at debug level, here one that discards.
	storeconfig.LogRedisTo(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	gwConfig := writeConfig(t, dir, "gateway.yaml", `
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: builtin:demo
watch: -1s
store: {url: "`+deadRedis+`", timeout: 20ms, on_error: local}
client_ip: {trusted_proxies: [10.0.0.1]}
rules:
  - name: enforced
    match: {path_prefix: /enforced}
    limit: {algorithm: fixed_window, rate: 1, period: 24h}
  - name: trial
    mode: shadow
    match: {path_prefix: /shadow}
    limit: {algorithm: fixed_window, rate: 1, period: 24h}
  - name: paced
    mode: queue
    max_delay: 1s
    match: {path_prefix: /queue}
    limit: {algorithm: leaky_bucket, rate: 20, period: 1s, burst: 1}
  - name: costly
    match: {path_prefix: /costly}
    limit: {algorithm: fixed_window, rate: 10, period: 24h}
    cost: 2
  - name: banned
    match: {path_prefix: /ban}
    limit: {algorithm: fixed_window, rate: 1, period: 24h}
    ban: 1h
  - name: billing
    match: {path_prefix: /billing}
    limit: {algorithm: fixed_window, rate: 10, calendar: monthly}
    offset_header: X-Billing-Offset
`)
	g, err := gateway.New(ctx, gwConfig, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rlsConfig := writeConfig(t, dir, "rls.yaml", `domain: d
descriptors:
  - key: k
    rate_limit: {unit: year, requests_per_unit: 1}
`)
	s, err := rls.NewServer(ctx, rlsConfig, rls.ServerOptions{
		GRPCListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Watch: -1,
		Store: storeconfig.Config{URL: deadRedis, Timeout: 20 * time.Millisecond, OnError: "local"},
	})
	if err != nil {
		t.Fatal(err)
	}
	gDone, sDone := make(chan error, 1), make(chan error, 1)
	go func() { gDone <- g.Run(ctx) }()
	go func() { sDone <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for _, done := range []chan error{gDone, sDone} {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})
	started := func(what string, addr func() net.Addr, done chan error) string {
		deadline := time.Now().Add(10 * time.Second)
		for addr() == nil {
			select {
			case err := <-done:
				t.Fatalf("%s: %v", what, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start", what)
			}
			time.Sleep(time.Millisecond)
		}
		return addr().String()
	}
	gwAddr := started("gateway", g.Addr, gDone)
	gwAdmin := started("gateway admin", g.AdminAddr, gDone)
	rlsHTTP := started("serve http", s.HTTPAddr, sDone)
	rlsAdmin := started("serve admin", s.AdminAddr, sDone)

	send := func(method, url, body string) int {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// The local fallback decides: the second request of each pair is over
	// its limit, refused, passed by the shadow rule, or queued.
	var codes []int
	for _, path := range []string{"/enforced", "/enforced", "/shadow", "/shadow", "/queue", "/queue", "/costly"} {
		codes = append(codes, send("GET", "http://"+gwAddr+path, ""))
	}
	for range 2 {
		codes = append(codes, send("POST", "http://"+rlsHTTP+"/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
	}
	if want := []int{200, 429, 200, 200, 200, 200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Errorf("statuses %v, want %v", codes, want)
	}
	// A failed reload and a good one, on both.
	for _, r := range []struct {
		path, bad string
		reload    func() error
	}{
		{gwConfig, "rules: [", g.Reload},
		{rlsConfig, "domain: [", s.Reload},
	} {
		good, err := os.ReadFile(r.path)
		if err != nil {
			t.Fatal(err)
		}
		writeConfig(t, dir, filepath.Base(r.path), r.bad)
		if err := r.reload(); err == nil {
			t.Errorf("%s: a broken file reloaded", r.path)
		}
		writeConfig(t, dir, filepath.Base(r.path), string(good))
		if err := r.reload(); err != nil {
			t.Errorf("%s: %v", r.path, err)
		}
	}

	exported := map[string]string{}
	for _, admin := range []string{gwAdmin, rlsAdmin} {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
				exported[f[2]] = f[3]
			}
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return exported
}
