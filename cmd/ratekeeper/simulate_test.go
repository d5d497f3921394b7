package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/sim"
)

// simulateDocCharts are the charts docs/algorithms.md, docs/redis.md and
// docs/gateway.md show: `make charts` runs `bin/ratekeeper simulate ARGS
// --out docs/img` for each.
var simulateDocCharts = []struct {
	name string
	args []string
}{
	{"pacing", []string{"pacing"}},
	{"pacing-with-pauses", []string{"pacing-with-pauses"}},
	{"boundary", []string{"boundary"}},
	{"accuracy", []string{"accuracy"}},
	{"pacing-wait", []string{"custom", "--worker", "wait", "--name", "pacing-wait"}},
	{"shared-roundrobin", []string{"shared-roundrobin"}},
	{"shared-skewed", []string{"shared-skewed"}},
	{"concurrency", []string{"concurrency"}},
	{"tokens", []string{"tokens"}},
	{"calendar", []string{"calendar"}},
}

// simulate runs the command and returns its stdout, stderr and error.
func simulate(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := runSimulate(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

type simulateSummary struct {
	Algorithm         string   `json:"algorithm"`
	ItemsDone         int      `json:"items_done"`
	ItemsLost         int      `json:"items_lost"`
	SecondsToFinish   float64  `json:"seconds_to_finish"`
	MaxPerTick        int      `json:"max_per_tick"`
	MaxPerWindow      int      `json:"max_per_window"`
	WronglyAllowedPct *float64 `json:"wrongly_allowed_pct"`
	WronglyDeniedPct  *float64 `json:"wrongly_denied_pct"`
}

func simulateJSON(t *testing.T, args ...string) []simulateSummary {
	t.Helper()
	out, errOut, err := simulate(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("simulate %v: %v\n%s", args, err, errOut)
	}
	var s []simulateSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("simulate %v: %v\n%s", args, err, out)
	}
	return s
}

// The committed charts' data must be what the command produces: rerun
// `make charts` when the simulator or an algorithm changes. (The command's
// own parsing makes the configs; only the CSVs are compared, so the charts
// are not drawn here.)
func TestSimulateCommittedCharts(t *testing.T) {
	docs := filepath.Join("..", "..", "docs", "img")
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, c := range simulateDocCharts {
		known[c.name+".csv"] = true
		line := "bin/ratekeeper simulate " + strings.Join(c.args, " ") + " --out docs/img"
		if !bytes.Contains(makefile, []byte(line)) {
			t.Errorf("the Makefile's charts target does not run %q", line)
		}
		_, s, err := parseSimulate(append(c.args, "--out", "docs/img"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if s.Name != c.name {
			t.Fatalf("simulate %v writes %s.csv, not %s.csv", c.args, s.Name, c.name)
		}
		res, err := sim.Run(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := res.WriteCSV(&got); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(docs, c.name+".csv"))
		if err != nil {
			t.Fatalf("%v (run make charts)", err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("docs/img/%s.csv no longer matches what `ratekeeper simulate %s` produces: run make charts", c.name, strings.Join(c.args, " "))
		}
		for _, ext := range []string{".svg", ".png"} {
			if fi, err := os.Stat(filepath.Join(docs, c.name+ext)); err != nil || fi.Size() == 0 {
				t.Errorf("docs/img/%s%s is missing: run make charts", c.name, ext)
			}
		}
	}
	csvs, _ := filepath.Glob(filepath.Join(docs, "*.csv"))
	for _, f := range csvs {
		if !known[filepath.Base(f)] {
			t.Errorf("%s is not made by make charts (add it to simulateDocCharts and the Makefile, or delete it)", f)
		}
	}
}

// The files the command writes are the ones the library writes.
func TestSimulateWritesFiles(t *testing.T) {
	for _, args := range [][]string{
		{"boundary", "--algorithms", "fixed_window,sliding_log"},
		{"shared-skewed", "--duration", "3s", "--sync-periods", "100ms"},
		{"concurrency", "--duration", "2s", "--max", "4"},
	} {
		dir := t.TempDir()
		if _, errOut, err := simulate(t, append(args, "--out", dir)...); err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		_, s, err := parseSimulate(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		res, err := sim.Run(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		for ext, write := range map[string]func(io.Writer) error{".csv": res.WriteCSV, ".svg": res.WriteSVG, ".png": res.WritePNG} {
			var want bytes.Buffer
			if err := write(&want); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, args[0]+ext))
			if err != nil || !bytes.Equal(got, want.Bytes()) {
				t.Errorf("%s%s: %d bytes written, want %d (%v)", args[0], ext, len(got), want.Len(), err)
			}
		}
	}
}

func TestSimulateCommandLine(t *testing.T) {
	// Flags before and after the scenario; the reference defaults.
	s := simulateJSON(t, "--algorithms", "token_bucket,sliding_log", "pacing")
	if len(s) != 2 || s[0].Algorithm != "token_bucket" || s[1].Algorithm != "sliding_log" {
		t.Fatalf("summaries %+v", s)
	}
	for _, x := range s {
		if x.ItemsDone != 10_000 || x.ItemsLost != 0 || x.WronglyAllowedPct != nil {
			t.Errorf("%+v", x)
		}
	}
	// Every flag applies: a custom run with two pauses and Wait pacing.
	s = simulateJSON(t, "custom", "--algorithms", "leaky_bucket", "--rate", "50", "--period", "500ms", "--burst", "5",
		"--items", "300", "--clients", "3", "--worker", "wait", "--tick", "50ms", "--pause", "1s+1s", "--pause", "3s+500ms")
	// 300 items at 100/s, one slot every 10 ms: 3 s of work and 1.5 s of
	// pauses.
	if len(s) != 1 || s[0].ItemsDone != 300 || s[0].MaxPerTick > 6 || s[0].SecondsToFinish < 4.4 || s[0].SecondsToFinish > 4.6 {
		t.Errorf("custom run: %+v", s)
	}
	// The table.
	out, _, err := simulate(t, "boundary", "--algorithms", "fixed_window")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "fixed_window") || !strings.Contains(out, "2000") || strings.Contains(out, "wrote ") {
		t.Errorf("table:\n%s", out)
	}
	// The shared scenarios take their own flags.
	var shared []struct {
		Mode                string `json:"mode"`
		SyncPeriod          string `json:"sync_period"`
		Offered             int    `json:"offered"`
		AdmittedPerInstance []int  `json:"admitted_per_instance"`
		MaxPerWindow        int    `json:"max_per_window"`
	}
	out, errOut, err := simulate(t, "shared-roundrobin", "--instances", "4", "--rate", "40", "--period", "500ms", "--load", "2",
		"--sync-periods", "50ms,1s", "--duration", "2s", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if err := json.Unmarshal([]byte(out), &shared); err != nil {
		t.Fatal(err)
	}
	// 80 per 500ms for 2s: 320 requests, dealt to 4 instances.
	if len(shared) != 5 || shared[0].Mode != "exact" || shared[0].MaxPerWindow != 40 || shared[0].Offered != 320 ||
		len(shared[0].AdmittedPerInstance) != 4 || shared[2].SyncPeriod != "1s" || shared[3].Mode != "lease" {
		t.Errorf("shared run: %+v", shared)
	}
	out, _, err = simulate(t, "shared-skewed", "--split", "3,1", "--duration", "2s")
	if err != nil || !strings.Contains(out, "skewed 3:1 (188, 63/s)") || !strings.Contains(out, "lease 1s") {
		t.Errorf("shared table (%v):\n%s", err, out)
	}
	// Accuracy reports the judge's verdicts.
	s = simulateJSON(t, "accuracy", "--clients", "5", "--duration", "2s", "--seed", "7")
	for _, x := range s {
		if x.WronglyAllowedPct == nil || x.WronglyDeniedPct == nil {
			t.Errorf("accuracy without the judge: %+v", x)
		}
	}
}

// The calendar scenario takes its zone, quota, load and tick: New York's
// calendar resets at its midnight, 05:00 UTC in winter, 04:00 in summer.
func TestSimulateCalendar(t *testing.T) {
	out, errOut, err := simulate(t, "calendar", "--time-zone", "America/New_York", "--rate", "200", "--load", "2", "--tick", "30m", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var s []struct {
		Case   string `json:"case"`
		Limit  string `json:"limit"`
		Quota  int    `json:"quota"`
		Resets []struct {
			UTC   string  `json:"utc"`
			Hours float64 `json:"hours"`
		} `json:"resets"`
		MostInPeriod int `json:"most_in_period"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if len(s) != 7 || s[0].Case != "monthly" || s[0].Limit != "calendar" || s[3].Case != "daily-23h" || s[3].Limit != "calendar" {
		t.Fatalf("summaries %+v", s)
	}
	if r := s[0].Resets; len(r) != 2 || r[0].UTC != "2026-03-01T05:00:00Z" || r[1].UTC != "2026-04-01T04:00:00Z" {
		t.Errorf("monthly resets %+v, want New York's midnights on the 1st", r)
	}
	if r := s[3].Resets; len(r) != 4 || r[1].UTC != "2026-03-08T05:00:00Z" || r[1].Hours != 23 {
		t.Errorf("daily resets %+v, want the 23-hour 8 March from 05:00 UTC", r)
	}
	for _, x := range s {
		if x.Quota != 200 || x.MostInPeriod != 200 {
			t.Errorf("%s %s: quota %d, at most %d in a period", x.Case, x.Limit, x.Quota, x.MostInPeriod)
		}
	}
}

// concurrencySummary is the concurrency scenario's JSON object.
type concurrencySummary struct {
	Max               int     `json:"max"`
	Offered           int     `json:"offered"`
	Admitted          int     `json:"admitted"`
	Refused           int     `json:"refused"`
	PeakInFlight      int     `json:"peak_in_flight"`
	MeanHoldSeconds   float64 `json:"mean_hold_seconds"`
	UnlimitedInFlight float64 `json:"unlimited_in_flight"`
}

func simulateConcurrency(t *testing.T, args ...string) concurrencySummary {
	t.Helper()
	out, errOut, err := simulate(t, append([]string{"concurrency", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("simulate concurrency %v: %v\n%s", args, err, errOut)
	}
	var s concurrencySummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("simulate concurrency %v: %v\n%s", args, err, out)
	}
	return s
}

// The concurrency scenario takes its own flags: what the limit promises
// holds whatever they say, and the same seed gives the same run.
func TestSimulateConcurrency(t *testing.T) {
	// The default: 1.5 times what 10 slots held 100 ms serve, for 10 s.
	s := simulateConcurrency(t)
	if s.Max != 10 || s.Offered != 1500 || s.PeakInFlight != 10 || s.Admitted+s.Refused != s.Offered || s.Refused == 0 || s.UnlimitedInFlight != 15 {
		t.Errorf("default: %+v", s)
	}
	if again := simulateConcurrency(t); again != s {
		t.Errorf("the same seed, another run: %+v, then %+v", s, again)
	}
	if other := simulateConcurrency(t, "--seed", "2"); other.MeanHoldSeconds == s.MeanHoldSeconds {
		t.Errorf("--seed changes nothing: %+v", other)
	}
	// Every flag: below capacity with fixed holds nothing is refused.
	s = simulateConcurrency(t, "--max", "4", "--load", "0.75", "--hold", "200ms", "--jitter=false", "--duration", "3s", "--tick", "500ms", "--seed", "5")
	if s.Max != 4 || s.Offered != 45 || s.Refused != 0 || s.PeakInFlight != 3 || s.MeanHoldSeconds != 0.2 {
		t.Errorf("below capacity: %+v", s)
	}
	// Far above it, the limit holds.
	s = simulateConcurrency(t, "--max", "3", "--load", "5", "--duration", "2s")
	if s.PeakInFlight != 3 || s.Admitted+s.Refused != s.Offered || s.Refused < s.Offered/2 {
		t.Errorf("five times capacity: %+v", s)
	}
	// The table states Little's law.
	out, _, err := simulate(t, "concurrency", "--name", "uploads")
	if err != nil || !strings.Contains(out, "uploads: max 10") || !strings.Contains(out, "Little's law, L = λW") {
		t.Errorf("table (%v):\n%s", err, out)
	}
	// The CSV's header is a contract.
	dir := t.TempDir()
	if _, errOut, err := simulate(t, "concurrency", "--duration", "1s", "--out", dir); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	csv, err := os.ReadFile(filepath.Join(dir, "concurrency.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(string(csv), "\n"); lines[0] != "t_ms,peak_in_flight,mean_in_flight,admitted,refused,max" || len(lines) != 1+4+1 {
		t.Errorf("CSV:\n%s", csv)
	}
}

func TestSimulateErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want one scenario"},
		{[]string{"pacing", "boundary"}, "want one scenario"},
		{[]string{"nope"}, "unknown scenario"},
		{[]string{"pacing", "--algorithms", "token_bucket,nope"}, "unknown algorithm"},
		{[]string{"pacing", "--pause", "4s"}, "AT+FOR"},
		{[]string{"pacing", "--worker", "sleep"}, "worker"},
		{[]string{"pacing", "--rate", "-1"}, "rate"},
		{[]string{"pacing", "--bogus"}, "bogus"},
		{[]string{"pacing", "--store", "foo://x"}, "unknown scheme"},
		{[]string{"pacing", "--load", "2"}, "--load does not apply to the pacing scenario"},
		{[]string{"shared-skewed", "--algorithms", "token_bucket"}, "--algorithms does not apply"},
		{[]string{"shared-skewed", "--store", "redis://localhost:6379"}, "--store does not apply"},
		{[]string{"shared-skewed", "--instances", "4"}, "--split"},
		{[]string{"shared-roundrobin", "--split", "1,x"}, "whole number"},
		{[]string{"shared-roundrobin", "--sync-periods", "10ms,soon"}, "sync-periods"},
		{[]string{"shared-roundrobin", "--duration", "1500ms"}, "duration"},
		{[]string{"shared-roundrobin", "--instances", "0"}, "split"},
		{[]string{"shared-roundrobin", "--max", "3"}, "--max does not apply to the shared-roundrobin scenario"},
		{[]string{"pacing", "--hold", "1s"}, "--hold does not apply to the pacing scenario"},
		{[]string{"accuracy", "--jitter"}, "--jitter does not apply"},
		{[]string{"concurrency", "--rate", "100"}, "--rate does not apply to the concurrency scenario"},
		{[]string{"concurrency", "--period", "1s"}, "--period does not apply"},
		{[]string{"concurrency", "--algorithms", "token_bucket"}, "--algorithms does not apply"},
		{[]string{"concurrency", "--burst", "5"}, "--burst does not apply"},
		{[]string{"concurrency", "--items", "5"}, "--items does not apply"},
		{[]string{"concurrency", "--clients", "5"}, "--clients does not apply"},
		{[]string{"concurrency", "--worker", "wait"}, "--worker does not apply"},
		{[]string{"concurrency", "--pause", "1s+1s"}, "--pause does not apply"},
		{[]string{"concurrency", "--store", "redis://localhost:6379"}, "--store does not apply"},
		{[]string{"concurrency", "--instances", "2"}, "--instances does not apply"},
		{[]string{"concurrency", "--split", "1,1"}, "--split does not apply"},
		{[]string{"concurrency", "--sync-periods", "1s"}, "--sync-periods does not apply"},
		{[]string{"concurrency", "--max", "0"}, "max"},
		{[]string{"concurrency", "--load", "0"}, "load"},
		{[]string{"concurrency", "--hold", "-1s"}, "hold"},
		{[]string{"concurrency", "--duration", "0s"}, "duration"},
		{[]string{"concurrency", "--tick", "0s"}, "tick"},
		{[]string{"concurrency", "--name", "a/b"}, "name"},
		{[]string{"calendar", "--period", "720h"}, "--period does not apply to the calendar scenario"},
		{[]string{"calendar", "--duration", "24h"}, "--duration does not apply"},
		{[]string{"calendar", "--seed", "2"}, "--seed does not apply"},
		{[]string{"calendar", "--time-zone", "Mars/Olympus"}, `--time-zone: "Mars/Olympus" is not a time zone`},
		{[]string{"calendar", "--time-zone", ""}, "--time-zone"},
		{[]string{"calendar", "--tick", "30s"}, "tick"},
		{[]string{"calendar", "--load", "-1"}, "load"},
		{[]string{"pacing", "--time-zone", "UTC"}, "--time-zone does not apply to the pacing scenario"},
	} {
		_, _, err := simulate(t, tc.args...)
		var u usageError
		if err == nil || !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("simulate %q: error %v, want a usage error about %q", tc.args, err, tc.want)
		}
	}
	if _, errOut, err := simulate(t, "-h"); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut, "pacing-with-pauses") || !strings.Contains(errOut, "-hold") {
		t.Errorf("-h: %v\n%s", err, errOut)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"simulate", "nope"}, &stdout, &stderr); code != 2 {
		t.Errorf("exit code %d for a bad scenario", code)
	}
}

// The Redis store, driven by the virtual clock, decides exactly as the
// memory store: the same summaries for every worker behaviour and for
// traffic.
func TestSimulateRedisMatchesMemory(t *testing.T) {
	url := redistest.Server(t)
	for _, args := range [][]string{
		{"pacing-with-pauses", "--items", "3000"},
		{"boundary", "--worker", "wait"},
		{"accuracy", "--clients", "8", "--duration", "3s"},
	} {
		mem := simulateJSON(t, args...)
		red := simulateJSON(t, append(args, "--store", url)...)
		if len(mem) != 5 || len(red) != len(mem) {
			t.Fatalf("%v: %d and %d summaries", args, len(mem), len(red))
		}
		for i := range mem {
			m, r := mem[i], red[i]
			if m.ItemsDone != r.ItemsDone || m.SecondsToFinish != r.SecondsToFinish || m.MaxPerTick != r.MaxPerTick || m.MaxPerWindow != r.MaxPerWindow ||
				(m.WronglyAllowedPct != nil) != (r.WronglyAllowedPct != nil) || m.WronglyAllowedPct != nil && *m.WronglyAllowedPct != *r.WronglyAllowedPct {
				t.Errorf("%v %s: memory %+v, redis %+v", args, m.Algorithm, m, r)
			}
		}
	}
}
