package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper/internal/configerr"
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

	doc *yaml.Node // the parsed document, for line numbers
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
	// DetailedMetric labels this descriptor's metrics with the request's
	// values rather than the configured ones. Its cardinality is the
	// clients': enable it only where that is acceptable.
	DetailedMetric bool `yaml:"detailed_metric"`
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

// maxFileSize bounds one configuration file.
const maxFileSize = 4 << 20

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
			errs = append(errs, &Error{File: f, Line: lineOf(d.doc, "domain"), Field: "domain",
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
	if len(data) > maxFileSize {
		return nil, &Error{File: name, Err: fmt.Errorf("file is larger than %d bytes", maxFileSize)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlErrors(name, &doc, err)
	}
	var d DomainConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Field: "domain", Err: errors.New("is missing: the file is empty")}
		}
		return nil, yamlErrors(name, &doc, err)
	}
	d.File, d.doc = name, &doc
	if errs := d.validate(); len(errs) > 0 {
		out := make([]error, len(errs))
		for i, e := range errs {
			e.File = name
			e.Line = lineOf(&doc, e.Field)
			out[i] = e
		}
		return nil, errors.Join(out...)
	}
	return &d, nil
}

// Validate reports every problem of d, or nil.
func (d *DomainConfig) Validate() error {
	errs := d.validate()
	out := make([]error, len(errs))
	for i, e := range errs {
		e.File = d.File
		e.Line = lineOf(d.doc, e.Field)
		out[i] = e
	}
	return errors.Join(out...)
}

func (d *DomainConfig) validate() []*Error {
	var errs []*Error
	if d.Domain == "" {
		errs = append(errs, &Error{Field: "domain", Err: errors.New("is missing: every file names its domain")})
	}
	validateDescriptors(d.Descriptors, "descriptors", &errs)
	return errs
}

func validateDescriptors(ds []DescriptorConfig, at string, errs *[]*Error) {
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
		if d.RateLimit != nil {
			for _, e := range d.RateLimit.validate() {
				e.Field = f + ".rate_limit" + e.Field
				*errs = append(*errs, e)
			}
		}
		validateDescriptors(d.Descriptors, f+".descriptors", errs)
	}
}

// validate reports the limit's problems, with fields relative to it
// (".unit").
func (r *RateLimitConfig) validate() []*Error {
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
		if r.Algorithm != "" || r.Burst != 0 {
			bad(".algorithm", errors.New("must not be set on an unlimited limit"))
		}
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
	if len(errs) == 0 && r.RequestsPerUnit > 0 {
		if err := r.limit().Validate(); err != nil {
			bad(".requests_per_unit", err)
		}
	}
	return errs
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line ([0-9]+): (.*)$`)

// yamlErrors turns yaml.v3's errors into *Errors with file, line and, where
// the line holds one key, the field.
func yamlErrors(name string, doc *yaml.Node, err error) error {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	out := make([]error, 0, len(msgs))
	for _, m := range msgs {
		e := &Error{File: name, Err: errors.New(strings.TrimPrefix(m, "yaml: "))}
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			e.Line, _ = strconv.Atoi(g[1])
			e.Err = errors.New(g[2])
			e.Field = fieldAt(doc, e.Line)
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// lineOf finds the line of field ("descriptors[0].rate_limit.unit") in
// doc, or of its nearest ancestor present, or 0.
func lineOf(doc *yaml.Node, field string) int {
	if doc == nil || len(doc.Content) == 0 {
		return 0
	}
	n := doc.Content[0]
	line := n.Line
	for _, part := range strings.Split(field, ".") {
		name, idx := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			name = part[:i]
			idx, _ = strconv.Atoi(part[i+1 : len(part)-1])
		}
		next := mappingValue(n, name)
		if next == nil {
			return line
		}
		line = next.key.Line
		n = next.val
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return line
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return line
}

type keyVal struct{ key, val *yaml.Node }

func mappingValue(n *yaml.Node, name string) *keyVal {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return &keyVal{n.Content[i], n.Content[i+1]}
		}
	}
	return nil
}

// fieldAt names the field whose key is on line, or "".
func fieldAt(doc *yaml.Node, line int) string {
	if doc == nil || len(doc.Content) == 0 {
		return ""
	}
	var walk func(n *yaml.Node, at string) string
	walk = func(n *yaml.Node, at string) string {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				f := n.Content[i].Value
				if at != "" {
					f = at + "." + f
				}
				if n.Content[i].Line == line {
					return f
				}
				if s := walk(n.Content[i+1], f); s != "" {
					return s
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				if s := walk(c, fmt.Sprintf("%s[%d]", at, i)); s != "" {
					return s
				}
			}
		}
		return ""
	}
	return walk(doc.Content[0], "")
}
