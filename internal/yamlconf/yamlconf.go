// Package yamlconf decodes a configuration file strictly: an unknown field
// or a value of the wrong type is an error. It reports every problem in
// the file at once, each as a configerr.Error naming the file, the line and
// the field. The rules file, the gateway's file and the decision service's
// file are all read through it.
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper/internal/configerr"
)

// MaxFileSize bounds what Decode reads: no sensible configuration is
// bigger.
const MaxFileSize = 4 << 20

// Decode decodes data into dst (a pointer to a struct with yaml tags),
// strictly, then asks validate for the problems of what it decoded, by
// field path, and gives each its line. A field that did not decode is not
// reported twice: its zero value is not the user's mistake. name (a file
// name) labels the errors. The positions it returns find the line of a
// field later (nil after a syntax error).
func Decode(name string, data []byte, dst any, validate func() []*configerr.Error) (*Positions, error) {
	if len(data) > MaxFileSize {
		return nil, &configerr.Error{File: name, Err: fmt.Errorf("file is larger than %d bytes", MaxFileSize)}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, syntaxError(name, data, err)
	}
	pos := indexPositions(&root)
	chk := &checker{name: name, byLine: map[int][]typedNode{}}
	chk.walk(&root, reflect.TypeOf(dst), "", nil, 0)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []error
	bad := map[string]bool{}                                           // fields that did not decode
	if err := dec.Decode(dst); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return pos, yamlError(name, pos, err) // not YAML, or not a mapping
		}
		// yaml.v3 decodes what it can around type errors: report them
		// and go on validating the rest.
		for _, e := range yamlErrors(name, pos, te.Errors) {
			unknownField(reflect.TypeOf(dst), e)
			chk.typeError(e)
			if e.Field == "" {
				e.Field = chk.customAt(e.Line)
			}
			out = append(out, e)
			bad[e.Field] = true
		}
	}
	for _, e := range chk.errs {
		out = append(out, e)
		bad[e.Field] = true
	}
	for _, e := range validate() {
		if bad[e.Field] {
			continue
		}
		e.File = name
		e.Line = pos.Line(e.Field)
		out = append(out, e)
	}
	return pos, errors.Join(out...)
}

var yamlLine = regexp.MustCompile(`(?s)^(?:yaml: )?line ([0-9]+): (.*)$`)

// yamlError turns yaml.v3's errors into *Errors naming file, line and, for
// type errors, the field.
func yamlError(name string, pos *Positions, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var out []error
	for _, e := range yamlErrors(name, pos, msgs) {
		var c *checker
		c.typeError(e)
		out = append(out, e)
	}
	return errors.Join(out...)
}

// syntaxError is yamlError for a document that does not parse, on the
// line that breaks it rather than the start of the block it breaks.
func syntaxError(name string, data []byte, err error) error {
	es := yamlErrors(name, nil, []string{err.Error()})
	e := es[0]
	if e.Line > 0 {
		if at := relocate(data, e.Line); at != e.Line {
			e.Err = fmt.Errorf("check this line's indentation: it breaks the block that starts on line %d (%w)", e.Line, e.Err)
			e.Line = at
		}
	}
	return e
}

func yamlErrors(name string, pos *Positions, msgs []string) []*configerr.Error {
	out := make([]*configerr.Error, 0, len(msgs))
	for _, m := range msgs {
		e := &configerr.Error{File: name, Err: errors.New(m)}
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			e.Line, _ = strconv.Atoi(g[1])
			e.Err = errors.New(g[2])
			if pos != nil {
				e.Field = pos.fieldAt(e.Line, e.Err.Error())
			}
		}
		out = append(out, e)
	}
	return out
}

// Positions maps the field paths of a YAML document to their lines.
type Positions struct {
	lines  map[string]int
	byLine map[int][]posEntry
	top    int // the first line of the document's content
}

// posEntry is a field on a line, with the text it was found by: a key's name
// or a scalar value.
type posEntry struct {
	path, text string
}

func indexPositions(root *yaml.Node) *Positions {
	p := &Positions{lines: map[string]int{}, byLine: map[int][]posEntry{}}
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		p.top = root.Content[0].Line
		p.walk(root.Content[0], "")
	}
	return p
}

func (p *Positions) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			p.lines[child] = k.Line
			p.byLine[k.Line] = append(p.byLine[k.Line], posEntry{child, k.Value})
			if v.Kind == yaml.ScalarNode {
				p.byLine[v.Line] = append(p.byLine[v.Line], posEntry{child, v.Value})
			}
			p.walk(v, child)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			child := fmt.Sprintf("%s[%d]", path, i)
			p.lines[child] = c.Line
			if c.Kind == yaml.ScalarNode {
				p.byLine[c.Line] = append(p.byLine[c.Line], posEntry{child, c.Value})
			}
			p.walk(c, child)
		}
	}
}

// Line finds the line of field, or of its nearest written ancestor, or
// the document's first (a field missing at the top).
func (p *Positions) Line(field string) int {
	for f := field; f != ""; {
		if l, ok := p.lines[f]; ok {
			return l
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return p.top
}

var quoted = regexp.MustCompile("`([^`]*)`|\"([^\"]*)\"|field ([^ ]+) not found")

// fieldAt names the field an error message on line is about: the one whose
// key or value the message quotes, or the only one on the line.
func (p *Positions) fieldAt(line int, msg string) string {
	es := p.byLine[line]
	if m := quoted.FindStringSubmatch(msg); m != nil {
		text := m[1] + m[2] + m[3]
		if m[3] != "" { // an unknown field: name its parent and itself
			for _, e := range es {
				if e.text == text {
					return e.path
				}
			}
		}
		for i := len(es) - 1; i >= 0; i-- {
			if es[i].text == text {
				return es[i].path
			}
		}
	}
	if len(es) > 0 && es[0].path == es[len(es)-1].path {
		return es[0].path
	}
	return ""
}

var notFound = regexp.MustCompile(`(?s)^field (.*) not found in type ([\w.\[\]*]+|struct \{.*\})$`)

// unknownField rewrites yaml.v3's "field limt not found in type
// rules.RuleConfig", which names a Go type, as "unknown field; valid: name,
// match, ..." after the field's path. It lists the keys the user may write
// there, read from dst's yaml tags.
func unknownField(dst reflect.Type, e *configerr.Error) {
	m := notFound.FindStringSubmatch(e.Err.Error())
	if m == nil {
		return
	}
	parent := ""
	if e.Field == "" {
		e.Field = m[1]
	} else if i := strings.LastIndexByte(e.Field, '.'); i >= 0 {
		parent = e.Field[:i]
	}
	t := typeAt(dst, parent)
	if t == nil {
		e.Err = errors.New("unknown field")
		return
	}
	e.Err = fmt.Errorf("unknown field; valid: %s", strings.Join(yamlKeys(t, nil), ", "))
}

// typeAt is the struct type at path ("rules[0].limit") under t, or nil.
func typeAt(t reflect.Type, path string) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for path != "" {
		switch {
		case path[0] == '[':
			i := strings.IndexByte(path, ']')
			if i < 0 || (t.Kind() != reflect.Slice && t.Kind() != reflect.Array) {
				return nil
			}
			t, path = t.Elem(), path[i+1:]
		case path[0] == '.':
			path = path[1:]
			continue
		default:
			i := strings.IndexAny(path, ".[")
			if i < 0 {
				i = len(path)
			}
			key := path[:i]
			path = path[i:]
			switch t.Kind() {
			case reflect.Map:
				t = t.Elem()
			case reflect.Struct:
				f, ok := fieldByKey(t, key)
				if !ok {
					return nil
				}
				t = f
			default:
				return nil
			}
		}
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return t
}

// yamlKey is the key a struct field is written as, and whether it is
// inlined; "" for a field YAML does not read.
func yamlKey(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	tag := f.Tag.Get("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "-" {
		return "", false
	}
	if strings.Contains(","+opts+",", ",inline,") {
		return "", true
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false
}

func fieldByKey(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := yamlKey(f)
		if inline {
			if ft, ok := fieldByKey(f.Type, key); ok {
				return ft, true
			}
		} else if name == key {
			return f.Type, true
		}
	}
	return nil, false
}

// yamlKeys appends the keys of struct type t, in declaration order.
func yamlKeys(t reflect.Type, keys []string) []string {
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := yamlKey(f)
		switch {
		case inline:
			keys = yamlKeys(f.Type, keys)
		case name != "":
			keys = append(keys, name)
		}
	}
	return keys
}

// KnownKeys reports the keys of mapping n, and of the mappings in it,
// that struct type t does not have, as Decode reports unknown fields. It
// is for a type with its own UnmarshalYAML, whose n.Decode does not check
// them.
func KnownKeys(n *yaml.Node, t reflect.Type) error {
	var errs []string
	unknownKeys(n, t, &errs, 0)
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

func unknownKeys(n *yaml.Node, t reflect.Type, errs *[]string, depth int) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if depth > 100 || (depth > 0 && reflect.PointerTo(t).Implements(unmarshalerType)) {
		return // checks its own keys
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			ft, ok := fieldByKey(t, k.Value)
			if !ok {
				*errs = append(*errs, fmt.Sprintf("line %d: field %s not found in type %s", k.Line, k.Value, t))
				continue
			}
			unknownKeys(n.Content[i+1], ft, errs, depth+1)
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			unknownKeys(n.Content[i], t.Elem(), errs, depth+1)
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for _, e := range n.Content {
			unknownKeys(e, t.Elem(), errs, depth+1)
		}
	}
}

// TopKeys are the keys of data's top-level mapping, in order; none when
// data is not a YAML mapping.
func TopKeys(data []byte) []string {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := root.Content[0]
	keys := make([]string, 0, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		keys = append(keys, m.Content[i].Value)
	}
	return keys
}
