package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/rules"
)

// calendarRules is a gateway file with calendar rules: a billing month in
// Berlin, with a client whose month starts elsewhere and one on the
// rule's own, and a daily quota in New York.
const calendarRules = `upstream: builtin:demo
client_ip: {trusted_proxies: [10.0.0.1]}
rules:
  - name: plan
    key: [header:X-Key]
    limit: {algorithm: fixed_window, rate: 10000, calendar: monthly, time_zone: Europe/Berlin, offset: 14d}
    overrides:
      acme: {rate: 50000, offset: 30d}
      beta: {rate: 20000}
  - name: signups
    limit: {algorithm: fixed_window, rate: 10, calendar: daily, time_zone: America/New_York}
  - name: epoch
    limit: {algorithm: fixed_window, rate: 10, period: 1d}
`

// TestCheckCalendarResets: check prints each calendar rule's next two
// resets in its zone and in UTC, across daylight saving changes and a
// short month; a client's own month only where it differs.
func TestCheckCalendarResets(t *testing.T) {
	c, err := gateway.Parse("c.yaml", []byte(calendarRules))
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(&c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	// 2025-02-15 in Berlin, before the 15th's reset; 2025-03-09 is New
	// York's 23-hour day, and 2025-03-30 Berlin's.
	printConfig(&out, c, set, time.Date(2025, 3, 8, 12, 0, 0, 0, time.UTC))
	want := []string{
		"     resets Sat 2025-03-15 00:00:00 CET (Fri 2025-03-14 23:00:00 UTC), then Tue 2025-04-15 00:00:00 CEST (Mon 2025-04-14 22:00:00 UTC)\n",
		`     "acme" resets Mon 2025-03-31 00:00:00 CEST (Sun 2025-03-30 22:00:00 UTC), then Wed 2025-04-30 00:00:00 CEST (Tue 2025-04-29 22:00:00 UTC)` + "\n",
		"     resets Sun 2025-03-09 00:00:00 EST (Sun 2025-03-09 05:00:00 UTC), then Mon 2025-03-10 00:00:00 EDT (Mon 2025-03-10 04:00:00 UTC)\n",
	}
	got := out.String()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("check's output lacks\n%s\n%s", w, got)
		}
	}
	berlin, err := rules.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if w := "     zone data " + rules.ZoneData(berlin) + ": every instance"; strings.Count(got, "zone data ") != 2 || !strings.Contains(got, w) {
		t.Errorf("check's output lacks the zone data of two calendar rules, Berlin's %q:\n%s", w, got)
	}
	if n := strings.Count(got, "resets "); n != len(want) {
		t.Errorf("%d lines of resets, want %d (beta's month is the rule's; epoch is no calendar):\n%s", n, len(want), got)
	}
}

// TestCheckCalendarOnRedis: check, connecting to Redis, accepts a calendar
// rule on a Redis store given by the file or by the environment, and
// prints its resets.
func TestCheckCalendarOnRedis(t *testing.T) {
	url := redistest.Server(t)
	path := filepath.Join(t.TempDir(), "c.yaml")
	run := func(yaml string) string {
		t.Helper()
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if err := runCheck(context.Background(), []string{"--config", path, "--connect"}, &out, &errOut); err != nil {
			t.Fatalf("check refused a calendar rule on Redis: %v\n%s", err, errOut.String())
		}
		return out.String()
	}
	check := func(name, got string) {
		t.Helper()
		if n := strings.Count(got, "resets "); n != 3 || !strings.Contains(got, path+": valid") {
			t.Errorf("%s: %d lines of resets, want 3:\n%s", name, n, got)
		}
	}
	check("the file's store", run("store: {url: '"+url+"'}\n"+calendarRules))
	t.Setenv("RATEKEEPER_STORE", url)
	check("the environment's store", run(calendarRules))
}

// docs/gateway.md's sample of check on a calendar rule is what check
// prints for the section's example on 8 March 2025.
func TestCheckCalendarAsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	section := doc[strings.Index(doc, "### Calendar quotas"):]
	yaml := section[strings.Index(section, "```yaml\n")+len("```yaml\n"):]
	yaml = yaml[:strings.Index(yaml, "```")]
	const cmd = "$ ratekeeper check --config plans.yaml\n...\n"
	i := strings.Index(doc, cmd)
	if i < 0 {
		t.Fatal("docs/gateway.md shows no " + cmd)
	}
	sample := doc[i+len(cmd):]
	sample = sample[:strings.Index(sample, "\n\n")+1]
	c, err := gateway.Parse("plans.yaml", []byte("upstream: builtin:demo\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(&c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printConfig(&out, c, set, time.Date(2025, 3, 8, 12, 0, 0, 0, time.UTC))
	if !strings.Contains(out.String(), sample) {
		t.Errorf("check prints\n%s\ndocs/gateway.md shows\n%s", out.String(), sample)
	}
}

// TestCheckServeCalendarOnRedis: check accepts serve's calendar_units on
// the Redis store serve's environment names.
func TestCheckServeCalendarOnRedis(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.yaml")
	if err := os.WriteFile(path, []byte("domain: d\ncalendar_units: Europe/Berlin\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RATEKEEPER_STORE", redistest.Server(t))
	var out, errOut bytes.Buffer
	if err := runCheck(context.Background(), []string{"--config", path, "--connect"}, &out, &errOut); err != nil {
		t.Fatalf("check refused calendar_units on Redis: %v\n%s", err, errOut.String())
	}
	if want := path + ": valid"; !strings.Contains(out.String(), want) {
		t.Errorf("got %s\nwant %s", out.String(), want)
	}
}

// TestCheckOffsetHeader: check says how far a client's own offset may
// move a calendar rule's resets, and refuses offset_header on a rule that
// is no calendar window, at its file:line.
func TestCheckOffsetHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	run := func(yaml string) (string, error) {
		t.Helper()
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err := runCheck(context.Background(), []string{"--config", path}, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	const head = "upstream: builtin:demo\nclient_ip: {trusted_proxies: [10.0.0.1]}\nrules:\n  - name: quota\n    key: [header:X-Key]\n"
	out, err := run(head + "    limit: {algorithm: fixed_window, rate: 100, calendar: monthly}\n    offset_header: X-Billing-Offset\n")
	if want := "     a client whose trusted proxy gives X-Billing-Offset resets at its own boundaries: the offset, 0 up to less than 31d"; err != nil || !strings.Contains(out, want) {
		t.Errorf("check: %v\n%s\nwant %s", err, out, want)
	}
	out, err = run(head + "    limit: {algorithm: fixed_window, rate: 100, period: 1d}\n    offset_header: X-Billing-Offset\n")
	if want := path + ":7: rules[0].offset_header: moves the boundaries of a calendar window, and the rule's limit has no calendar"; err == nil || !strings.Contains(out+err.Error(), want) {
		t.Errorf("check of an epoch rule: %v\n%s\nwant %s", err, out, want)
	}
}
