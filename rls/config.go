package rls

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/configerr"
	"github.com/ratekeeper/ratekeeper/internal/yamlconf"
	"github.com/ratekeeper/ratekeeper/rules"
)

// Config is a whole configuration: the domains of one file, or of every
// YAML file of a directory.
type Config struct {
	// Domains are the files' contents, one domain each, in file name order.
	Domains []DomainConfig
}

// DomainConfig is one file: a domain and its descriptors.
type DomainConfig struct {
	// File names the file the domain came from, for messages.
	File string `yaml:"-"`
	// Domain scopes the descriptors; requests name it.
	Domain string `yaml:"domain"`
	// Descriptors are the top-level descriptors.
	Descriptors []DescriptorConfig `yaml:"descriptors"`
	// CalendarUnits, a time zone (Europe/Berlin, or UTC), makes the units
	// day, week, month and year of the domain's fixed windows calendar
	// periods in that zone. Empty: fixed lengths, a month being 30 days.
	CalendarUnits string `yaml:"calendar_units"`

	pos *yamlconf.Positions // the file's, for line numbers
}

// DescriptorConfig is one descriptor: a key, an optional value, and a limit
// or nested descriptors (or both).
type DescriptorConfig struct {
	// Key must equal the request entry's key.
	Key string `yaml:"key"`
	// Value, when set, must equal the entry's value; a value ending in *
	// matches every value that starts with what comes before the *. Empty
	// matches any value, each value counted on its own.
	Value string `yaml:"value"`
	// RateLimit is the limit of requests whose descriptor ends here.
	RateLimit *RateLimitConfig `yaml:"rate_limit"`
	// Descriptors match the request's next entry.
	Descriptors []DescriptorConfig `yaml:"descriptors"`
	// ShadowMode decides and counts as usual but always answers OK.
	ShadowMode bool `yaml:"shadow_mode"`
	// QuotaMode decides and counts as usual; over the limit, the
	// descriptor's status is OVER_LIMIT but the overall code stays OK, so
	// that Envoy may route on it (envoyproxy/ratelimit's quota_mode).
	QuotaMode bool `yaml:"quota_mode"`
	// DetailedMetric labels this descriptor's metrics with the request's
	// values rather than the configured ones. Its cardinality is the
	// clients': enable it only where that is acceptable.
	DetailedMetric bool `yaml:"detailed_metric"`
	// ShowKey shows the request's values of this descriptor, and of those
	// nested in it, as they are in the admin's lists of limited clients
	// (/v1/top) and traces. Without it each value is a fingerprint.
	ShowKey bool `yaml:"show_key"`
}

// RateLimitConfig is a limit: requests_per_unit per unit, by an algorithm.
type RateLimitConfig struct {
	// Name lets other limits replace this one.
	Name string `yaml:"name"`
	// Replaces names limits that this one replaces when both apply to a
	// request: they are neither checked nor counted.
	Replaces []ReplaceConfig `yaml:"replaces"`
	// Unit is second, minute, hour, day, week, month (30 days) or year (365
	// days), in any case.
	Unit string `yaml:"unit"`
	// RequestsPerUnit is the limit; 0 refuses every request.
	RequestsPerUnit int64 `yaml:"requests_per_unit"`
	// Unlimited answers OK without counting.
	Unlimited bool `yaml:"unlimited"`
	// Algorithm is ratekeeper's extension: one of the five algorithms;
	// default fixed_window, the reference service's.
	Algorithm string `yaml:"algorithm"`
	// Burst is ratekeeper's extension: the capacity of token_bucket and
	// leaky_bucket; default requests_per_unit.
	Burst int `yaml:"burst"`
	// CalendarUnits is the domain's calendar_units for this limit alone.
	CalendarUnits string `yaml:"calendar_units"`
}

// ReplaceConfig names a limit to replace.
type ReplaceConfig struct {
	// Name is the replaced limit's name.
	Name string `yaml:"name"`
}

// Error is one problem in a configuration file, located by file, line and
// field ("file:line: field: problem"); the gateway's rules report the same
// type.
type Error = configerr.Error

// Load reads the configuration at path: one YAML file, or every *.yaml and
// *.yml file of a directory (not its subdirectories; names starting with a
// dot are skipped), one domain per file. Two files may not declare the same
// domain. Every problem is reported, each as an *Error.
func Load(path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		files = files[:0]
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() || strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			files = append(files, filepath.Join(path, n))
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("config: %s has no *.yaml or *.yml files", path)
		}
	}
	c := &Config{}
	var errs []error
	seen := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: %w", err))
			continue
		}
		d, err := ParseDomain(f, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, ok := seen[d.Domain]; ok {
			errs = append(errs, &Error{File: f, Line: d.pos.Line("domain"), Field: "domain",
				Err: fmt.Errorf("domain %q is already declared in %s", d.Domain, prev)})
			continue
		}
		seen[d.Domain] = f
		c.Domains = append(c.Domains, *d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// ParseDomain decodes and validates one file's contents; name labels
// errors. Unknown fields are errors.
func ParseDomain(name string, data []byte) (*DomainConfig, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &Error{File: name, Field: "domain", Err: errors.New("is missing: the file is empty")}
	}
	var d DomainConfig
	pos, err := yamlconf.Decode(name, data, &d, d.validate)
	if err != nil {
		return nil, err
	}
	d.File, d.pos = name, pos
	return &d, nil
}

// Validate reports every problem of d, or nil.
func (d *DomainConfig) Validate() error {
	errs := d.validate()
	out := make([]error, len(errs))
	for i, e := range errs {
		e.File = d.File
		if d.pos != nil {
			e.Line = d.pos.Line(e.Field)
		}
		out[i] = e
	}
	return errors.Join(out...)
}

func (d *DomainConfig) validate() []*Error {
	var errs []*Error
	if d.Domain == "" {
		errs = append(errs, &Error{Field: "domain", Err: errors.New("is missing: every file names its domain")})
	}
	if _, err := rules.LoadZone(d.CalendarUnits); err != nil {
		errs = append(errs, &Error{Field: "calendar_units", Err: err})
	}
	validateDescriptors(d.Descriptors, "descriptors", d.CalendarUnits, &errs)
	return errs
}

// validateDescriptors reports the problems of ds at field at, in a domain
// whose calendar_units is zone.
func validateDescriptors(ds []DescriptorConfig, at, zone string, errs *[]*Error) {
	seen := map[[2]string]int{}
	for i := range ds {
		d := &ds[i]
		f := fmt.Sprintf("%s[%d]", at, i)
		if d.Key == "" {
			*errs = append(*errs, &Error{Field: f + ".key", Err: errors.New("is missing")})
		}
		k := [2]string{d.Key, d.Value}
		if j, ok := seen[k]; ok {
			*errs = append(*errs, &Error{Field: f + ".value", Err: fmt.Errorf("key %q with value %q is already described by %s[%d]", d.Key, d.Value, at, j)})
		}
		seen[k] = i
		if d.QuotaMode && d.ShadowMode {
			*errs = append(*errs, &Error{Field: f + ".quota_mode", Err: errors.New("shadow_mode answers OK with an OK status; quota_mode reports OVER_LIMIT in the status: keep one")})
		}
		if d.RateLimit != nil {
			for _, e := range d.RateLimit.validate(zone) {
				e.Field = f + ".rate_limit" + e.Field
				*errs = append(*errs, e)
			}
		}
		validateDescriptors(d.Descriptors, f+".descriptors", zone, errs)
	}
}

// validate reports the limit's problems, with fields relative to it
// (".unit"), in a domain whose calendar_units is zone.
func (r *RateLimitConfig) validate(zone string) []*Error {
	var errs []*Error
	bad := func(field string, err error) { errs = append(errs, &Error{Field: field, Err: err}) }
	for i, rp := range r.Replaces {
		if rp.Name == "" {
			bad(fmt.Sprintf(".replaces[%d].name", i), errors.New("is missing"))
		}
	}
	if r.Unlimited {
		if r.Unit != "" {
			bad(".unit", errors.New("must not be set on an unlimited limit"))
		}
		if r.RequestsPerUnit != 0 {
			bad(".requests_per_unit", errors.New("must not be set on an unlimited limit"))
		}
		if r.Algorithm != "" {
			bad(".algorithm", errors.New("must not be set on an unlimited limit"))
		}
		if r.Burst != 0 {
			bad(".burst", errors.New("must not be set on an unlimited limit"))
		}
		if r.CalendarUnits != "" {
			bad(".calendar_units", errors.New("must not be set on an unlimited limit"))
		}
		return errs
	}
	if _, err := rules.LoadZone(r.CalendarUnits); err != nil {
		bad(".calendar_units", err)
		return errs
	}
	if r.Unit == "" {
		bad(".unit", errors.New("is missing: second, minute, hour, day, week, month or year"))
	} else if _, _, ok := parseUnit(r.Unit); !ok {
		bad(".unit", fmt.Errorf("%q is not second, minute, hour, day, week, month or year", r.Unit))
	}
	if r.RequestsPerUnit < 0 || r.RequestsPerUnit > 1<<32-1 {
		bad(".requests_per_unit", fmt.Errorf("must be in 0..4294967295, not %d", r.RequestsPerUnit))
	}
	alg := r.algorithm()
	if !alg.Valid() {
		bad(".algorithm", fmt.Errorf("%q is not token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window", r.Algorithm))
		return errs
	}
	if r.Burst < 0 {
		bad(".burst", fmt.Errorf("must not be negative, not %d", r.Burst))
	} else if r.Burst > 0 && alg != "token_bucket" && alg != "leaky_bucket" {
		bad(".burst", fmt.Errorf("only applies to token_bucket and leaky_bucket, not %s", alg))
	}
	if len(errs) == 0 && r.limit(zone).Calendar != "" && alg != ratekeeper.FixedWindow {
		bad(".algorithm", fmt.Errorf("%s cannot follow the calendar that calendar_units asks for: use fixed_window, or a unit of an hour or less", alg))
	}
	if len(errs) == 0 && r.RequestsPerUnit > 0 {
		if err := r.limit(zone).Validate(); err != nil {
			bad(".requests_per_unit", err)
		}
	}
	return errs
}

// Warnings lists what c's files say that serve accepts but that can never
// apply, each located like an error:
//   - white space around a domain, a key or a value (Envoy sends the
//     domain as configured, and a header's value without it);
//   - a descriptor with neither rate_limit nor descriptors, which limits
//     nothing;
//   - a * that does not end a value, which matches only a *;
//   - a replaces that names no limit of its domain.
func (c *Config) Warnings() []*Error {
	var out []*Error
	for i := range c.Domains {
		d := &c.Domains[i]
		var ws []*Error
		if strings.TrimSpace(d.Domain) != d.Domain {
			ws = append(ws, &Error{Field: "domain", Err: fmt.Errorf("has white space around it: %q; Envoy's domain must equal it", d.Domain)})
		}
		names := map[string]bool{}
		limitNames(d.Descriptors, names)
		warnDescriptors(d.Domain, d.Descriptors, "descriptors", names, &ws)
		for _, w := range ws {
			w.File = d.File
			if d.pos != nil {
				w.Line = d.pos.Line(w.Field)
			}
		}
		out = append(out, ws...)
	}
	return out
}

// limitNames adds the names of the limits in ds, at any depth, to names.
func limitNames(ds []DescriptorConfig, names map[string]bool) {
	for _, d := range ds {
		if d.RateLimit != nil && d.RateLimit.Name != "" {
			names[d.RateLimit.Name] = true
		}
		limitNames(d.Descriptors, names)
	}
}

func warnDescriptors(domain string, ds []DescriptorConfig, at string, names map[string]bool, ws *[]*Error) {
	warn := func(field, format string, args ...any) {
		*ws = append(*ws, &Error{Field: field, Err: fmt.Errorf(format, args...)})
	}
	for i, d := range ds {
		f := fmt.Sprintf("%s[%d]", at, i)
		if d.RateLimit == nil && len(d.Descriptors) == 0 {
			warn(f, "has neither rate_limit nor descriptors: the requests it matches are not limited (rate_limit: {unlimited: true} says so)")
		}
		if strings.TrimSpace(d.Key) != d.Key {
			warn(f+".key", "has white space around it: %q", d.Key)
		}
		if strings.TrimSpace(d.Value) != d.Value {
			warn(f+".value", "has white space around it: %q; a header's value never has", d.Value)
		}
		if i := strings.IndexByte(d.Value, '*'); i >= 0 && i < len(d.Value)-1 {
			warn(f+".value", "%q: * is a wildcard only at the end; here it matches only a * itself", d.Value)
		}
		if d.RateLimit != nil {
			for j, rp := range d.RateLimit.Replaces {
				if rp.Name != "" && !names[rp.Name] {
					warn(fmt.Sprintf("%s.rate_limit.replaces[%d].name", f, j), "no limit of domain %q is named %q: it replaces nothing", domain, rp.Name)
				}
			}
		}
		warnDescriptors(domain, d.Descriptors, f+".descriptors", names, ws)
	}
}
