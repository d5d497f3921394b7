package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func TestLoadReferenceExamples(t *testing.T) {
	c, err := Load("testdata/reference")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"edge_proxy_per_ip", "example4", "example6", "example7", "example8", "example9", "internal", "messaging", "mongo_cps"}
	if got := rules.Domains(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("domains = %v, want %v", got, want)
	}
	if rules.Len() != 16 {
		t.Errorf("limits = %d, want 16", rules.Len())
	}
	// Every limited rule of a reference file is a fixed window.
	for _, r := range rules.rules {
		if !r.unlimit && r.rpu > 0 && r.limit.Algorithm != ratekeeper.FixedWindow {
			t.Errorf("%s: algorithm %s, want fixed_window", r.stat, r.limit.Algorithm)
		}
	}
}

func TestLoadExtensions(t *testing.T) {
	c, err := Load("testdata/extensions/algorithms.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ratekeeper.Limit{
		"api.user":          {Algorithm: ratekeeper.TokenBucket, Rate: 10, Period: time.Second, Burst: 20},
		"api.device":        {Algorithm: ratekeeper.LeakyBucket, Rate: 60, Period: time.Minute},
		"api.account":       {Algorithm: ratekeeper.SlidingWindow, Rate: 1000, Period: time.Hour},
		"api.signup_ip":     {Algorithm: ratekeeper.SlidingLog, Rate: 10, Period: 24 * time.Hour},
		"api.reward_device": {Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: 7 * 24 * time.Hour},
		"api.tenant":        {Algorithm: ratekeeper.FixedWindow, Rate: 1000000, Period: 30 * 24 * time.Hour},
		"api.plan":          {Algorithm: ratekeeper.FixedWindow, Rate: 10000000, Period: 365 * 24 * time.Hour},
	}
	for _, r := range rules.rules {
		if w, ok := want[r.stat]; !ok || r.limit != w {
			t.Errorf("%s: limit %+v, want %+v", r.stat, r.limit, w)
		}
		delete(want, r.stat)
	}
	if len(want) > 0 {
		t.Errorf("missing rules: %v", want)
	}
}

func TestConfigErrorsNameFileLineField(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the error, every one
	}{
		{"unknown field", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      request_per_unit: 5\n",
			[]string{"f.yaml:6:", "descriptors[0].rate_limit.request_per_unit", "unknown field; valid:", "requests_per_unit"}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n",
			[]string{"f.yaml:5: descriptors[0].rate_limit.unit:", "fortnight"}},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.unit: is missing"}},
		{"missing key", "domain: d\ndescriptors:\n  - value: v\n",
			[]string{"f.yaml:3: descriptors[0].key: is missing"}},
		{"missing domain", "descriptors:\n  - key: k\n",
			[]string{"f.yaml:1: domain: is missing"}},
		{"empty file", "", []string{"f.yaml: domain: is missing"}},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit:\n          unit: minute\n          requests_per_unit: 5\n          algorithm: gcra\n",
			[]string{"f.yaml:9: descriptors[0].descriptors[0].rate_limit.algorithm:", "gcra"}},
		{"burst on a window", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      burst: 9\n",
			[]string{"f.yaml:7: descriptors[0].rate_limit.burst:", "fixed_window"}},
		{"negative rate", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: -1\n",
			[]string{"f.yaml:6: descriptors[0].rate_limit.requests_per_unit:"}},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: minute\n",
			[]string{"f.yaml:6: descriptors[0].rate_limit.unit: must not be set"}},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: a\n    value: x\n",
			[]string{"f.yaml:6: descriptors[1].value:", "descriptors[0]"}},
		{"wrong type", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n",
			[]string{"f.yaml:4:", "descriptors[0].shadow_mode"}},
		{"not yaml", "domain: [\n", []string{"f.yaml:"}},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - {}\n",
			[]string{"f.yaml:8: descriptors[0].rate_limit.replaces[0].name: is missing"}},
		{"fractional rate", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 2.5\n",
			[]string{"f.yaml:6: descriptors[0].rate_limit.requests_per_unit: 2.5 is not a whole number", "requests_per_unit: 150, unit: minute"}},
		{"rate under one", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 0.5}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.requests_per_unit: 0.5 is not a whole number", "requests_per_unit: 12, unit: day"}},
		{"fractional burst", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token_bucket, burst: 1.5}\n",
			[]string{"f.yaml:4: descriptors[0].rate_limit.burst: 1.5 is not a whole number"}},
		{"sliding window too large", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: year\n      requests_per_unit: 4000000000\n      algorithm: sliding_window\n",
			[]string{"f.yaml:6: descriptors[0].rate_limit.requests_per_unit:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDomain("f.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %T is not an *Error", err)
			}
		})
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: one\ndescriptors:\n  - key: k\n")
	write("b.yml", "domain: two\n")
	write(".hidden.yaml", "not: [valid\n")
	write("notes.txt", "not yaml at all: [\n")
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Domains) != 2 || c.Domains[0].Domain != "one" || c.Domains[1].Domain != "two" {
		t.Fatalf("domains = %+v", c.Domains)
	}
	write("c.yaml", "\n\ndomain: one\n")
	_, err = Load(dir)
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3: domain:") || !strings.Contains(err.Error(), "a.yaml") {
		t.Fatalf("duplicate domain: err = %v", err)
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Fatal("an empty directory loaded")
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

// FuzzParseDomain checks that no input panics, that every error and
// warning is located in the file, and that whatever parses also compiles.
func FuzzParseDomain(f *testing.F) {
	for _, dir := range []string{"testdata/reference", "testdata/extensions"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: '*'\n    rate_limit: {unit: SECOND, requests_per_unit: 1}\n"))
	f.Add([]byte("domain: d\ndescriptors: [{key: a, descriptors: [{key: b, rate_limit: {unlimited: true}}]}]\n"))
	f.Add([]byte(calendarDomain))
	f.Add([]byte("domain: d\ncalendar_units: ../../etc/passwd\ndescriptors: [{key: a, rate_limit: {unit: year, requests_per_unit: 1, calendar_units: Pacific/Apia}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDomain("fuzz.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml:") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		c := &Config{Domains: []DomainConfig{*d}}
		if _, err := Compile(c); err != nil {
			t.Fatalf("parsed but does not compile: %v", err)
		}
		for _, w := range c.Warnings() {
			if w.File != "fuzz.yaml" || w.Line == 0 {
				t.Fatalf("warning not located: %v", w)
			}
		}
	})
}

// TestInapplicableLimitFields: burst, serve's only algorithm-specific field,
// is valid on the buckets and an error at its line on every other algorithm
// (the default, fixed_window, included) and on an unlimited limit, as in
// the gateway's rules (rules.TestInapplicableLimitFields).
func TestInapplicableLimitFields(t *testing.T) {
	for _, a := range append([]ratekeeper.Algorithm{""}, ratekeeper.Algorithms...) {
		t.Run("burst/"+cmpOr(string(a), "default"), func(t *testing.T) {
			alg := ""
			if a != "" {
				alg = "      algorithm: " + string(a) + "\n"
			}
			yaml := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n" + alg + "      burst: 9\n"
			_, err := ParseDomain("f.yaml", []byte(yaml))
			if a == ratekeeper.TokenBucket || a == ratekeeper.LeakyBucket {
				if err != nil {
					t.Fatalf("burst on %s: %v", a, err)
				}
				return
			}
			line := "7"
			if a != "" {
				line = "8"
			}
			want := "f.yaml:" + line + ": descriptors[0].rate_limit.burst: "
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), string(cmpOr(a, ratekeeper.FixedWindow))) {
				t.Fatalf("burst on %q: %v, want %q naming the algorithm", a, err, want)
			}
		})
	}
	t.Run("burst/unlimited", func(t *testing.T) {
		_, err := ParseDomain("f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      burst: 9\n"))
		if want := "f.yaml:6: descriptors[0].rate_limit.burst: must not be set on an unlimited limit"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v, want %q", err, want)
		}
	})
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
