package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/rls"
)

// referencePath is the configuration reference the test holds to the code.
const referencePath = "../../docs/reference.md"

// referenceFormats are the file formats of docs/reference.md: the title of
// each one's "## " section, and the type a file decodes into.
var referenceFormats = []struct {
	title string
	root  reflect.Type
}{
	{"Gateway file", reflect.TypeFor[gateway.Config]()},
	{"Descriptor files", reflect.TypeFor[rls.DomainConfig]()},
}

// TestReferenceDocumentsEverything holds docs/reference.md to the decoders
// and the flag sets. A field is a table row whose first cell is its yaml
// name in backticks, under the "### `path`" heading of the object it is in
// (the format's "## " heading for the top level). A struct type met at
// several paths (a limit, TLS settings) is documented at one of them. A flag
// is a row "`--name`" under a "### " heading naming its commands in
// backticks. Every field and flag must have exactly one row, and every row
// must name a field or flag that exists.
func TestReferenceDocumentsEverything(t *testing.T) {
	b, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	doc := parseReference(string(b))
	for _, f := range referenceFormats {
		sections, ok := doc[f.title]
		if !ok {
			t.Errorf("docs/reference.md has no section %q", "## "+f.title)
			continue
		}
		checkFields(t, f.title, f.root, sections)
	}
	checkFlags(t, doc["Command-line flags"])
	if env := doc["Environment variables"][""]; env[passwordEnv] != 1 || env[envPrefix+"<FLAG>"] != 1 {
		t.Errorf("docs/reference.md's environment variables should have one row for %s and one for %s<FLAG>", passwordEnv, envPrefix)
	}
}

// referenceDoc maps a "## " title to its sections: a "### " heading's
// text in backticks ("" before the first) to the count of rows of each
// name.
type referenceDoc map[string]map[string]map[string]int

var (
	rowName  = regexp.MustCompile("^\\| `([^`]+)` \\|")
	backtick = regexp.MustCompile("`([^`]+)`")
)

// parseReference reads the rows of every table of the page.
func parseReference(text string) referenceDoc {
	doc := referenceDoc{}
	var h2, h3 string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			h2, h3 = strings.TrimPrefix(line, "## "), ""
			doc[h2] = map[string]map[string]int{"": {}}
		case strings.HasPrefix(line, "### "):
			h3 = ""
			for _, m := range backtick.FindAllStringSubmatch(line, -1) {
				h3 = strings.TrimSpace(h3 + " " + m[1])
			}
			if doc[h2][h3] == nil {
				doc[h2][h3] = map[string]int{}
			}
		case h2 != "":
			if m := rowName.FindStringSubmatch(line); m != nil {
				doc[h2][h3][m[1]]++
			}
		}
	}
	return doc
}

// shape is a struct type of a file format: the paths it is found at, and
// its fields' yaml names.
type shape struct {
	paths  []string
	fields []string
}

// checkFields compares the struct types under root with the format's
// sections.
func checkFields(t *testing.T, format string, root reflect.Type, sections map[string]map[string]int) {
	t.Helper()
	shapes := map[reflect.Type]*shape{}
	var order []reflect.Type
	walkYAML(root, "", shapes, &order)
	used := map[string]bool{}
	for _, typ := range order {
		s := shapes[typ]
		var documented []string
		for _, p := range s.paths {
			if _, ok := sections[p]; ok {
				documented = append(documented, p)
			}
		}
		if len(documented) != 1 {
			t.Errorf("%s: %s (at %s) should be documented under one heading ### `PATH` of these paths, not %d",
				format, typ, strings.Join(s.paths, ", "), len(documented))
			continue
		}
		p := documented[0]
		used[p] = true
		rows := sections[p]
		for _, f := range s.fields {
			switch n := rows[f]; {
			case n == 0:
				t.Errorf("%s: field `%s` is not documented", format, join(p, f))
			case n > 1:
				t.Errorf("%s: field `%s` is documented %d times", format, join(p, f), n)
			}
		}
		for name := range rows {
			if !slices.Contains(s.fields, name) {
				t.Errorf("%s: `%s` is documented, but there is no such field", format, join(p, name))
			}
		}
	}
	for p := range sections {
		if !used[p] {
			t.Errorf("%s: section `%s` is no object of the format", format, p)
		}
	}
}

// walkYAML records the fields of struct type typ found at path, then walks
// the struct types of its fields, each once.
func walkYAML(typ reflect.Type, path string, shapes map[reflect.Type]*shape, order *[]reflect.Type) {
	if s, ok := shapes[typ]; ok {
		s.paths = append(s.paths, path)
		return
	}
	s := &shape{paths: []string{path}}
	shapes[typ] = s
	*order = append(*order, typ)
	addYAMLFields(typ, path, s, shapes, order)
}

// addYAMLFields adds typ's fields to s, those of inline structs included.
func addYAMLFields(typ reflect.Type, path string, s *shape, shapes map[reflect.Type]*shape, order *[]reflect.Type) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case !f.IsExported() || name == "-":
			continue
		case opts == "inline":
			addYAMLFields(f.Type, path, s, shapes, order)
			continue
		case name == "":
			name = strings.ToLower(f.Name)
		}
		s.fields = append(s.fields, name)
		elem, suffix := f.Type, ""
		for {
			switch elem.Kind() {
			case reflect.Pointer:
				elem = elem.Elem()
				continue
			case reflect.Slice:
				elem, suffix = elem.Elem(), suffix+"[]"
				continue
			case reflect.Map:
				elem, suffix = elem.Elem(), suffix+".*"
				continue
			}
			break
		}
		if elem.Kind() == reflect.Struct {
			walkYAML(elem, join(path, name)+suffix, shapes, order)
		}
	}
}

// join is a field's path: parent.name, or name at the top.
func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// flagLine is a flag in a command's -h output.
var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)(?: |$)`)

// commandFlags are the flags a command's -h lists.
func commandFlags(t *testing.T, name string) []string {
	t.Helper()
	var out bytes.Buffer
	if code := run(context.Background(), []string{name, "-h"}, io.Discard, &out); code != 0 {
		t.Fatalf("ratekeeper %s -h: exit status %d\n%s", name, code, out.String())
	}
	var flags []string
	for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
		flags = append(flags, m[1])
	}
	return flags
}

// checkFlags compares every command's flags with the rows of the
// sections that name the command.
func checkFlags(t *testing.T, sections map[string]map[string]int) {
	t.Helper()
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, cmd := range names {
		rows := map[string]int{}
		named := false
		for heading, sec := range sections {
			if !slices.Contains(strings.Fields(heading), cmd) {
				continue
			}
			named = true
			for flag, n := range sec {
				rows[flag] += n
			}
		}
		if !named {
			t.Errorf("docs/reference.md has no ### heading naming `%s`", cmd)
		}
		flags := commandFlags(t, cmd)
		for _, f := range flags {
			switch n := rows["--"+f]; {
			case n == 0:
				t.Errorf("flag --%s of %s is not documented", f, cmd)
			case n > 1:
				t.Errorf("flag --%s of %s is documented %d times", f, cmd, n)
			}
		}
		for row := range rows {
			if !slices.Contains(flags, strings.TrimPrefix(row, "--")) {
				t.Errorf("%s is documented for %s, which has no such flag", row, cmd)
			}
		}
	}
}
