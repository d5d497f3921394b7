package yamlconf

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper/internal/configerr"
)

// A FractionHinter is a struct that suggests how to write a whole-number
// field that a file gave as a fraction.
type FractionHinter interface {
	// FractionHint is the fix for value written for key, given the other
	// scalars of the mapping by key; "" for none.
	FractionHint(key string, value float64, sibling func(key string) string) string
}

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	hinterType      = reflect.TypeFor[FractionHinter]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// typedNode is a node of the document and the Go type it decodes into.
type typedNode struct {
	path string
	t    reflect.Type
}

// checker walks a document beside the type it decodes into. It finds the
// fractions that yaml.v3 would silently truncate into whole numbers. It
// notes each node's type, so that a type error can name its field.
type checker struct {
	name   string
	errs   []*configerr.Error
	byLine map[int][]typedNode
}

func (c *checker) walk(n *yaml.Node, t reflect.Type, path string, hint func(float64) string, depth int) {
	if depth > 100 {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.DocumentNode {
		for _, k := range n.Content {
			c.walk(k, t, path, hint, depth+1)
		}
		return
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	c.byLine[n.Line] = append(c.byLine[n.Line], typedNode{path, t})
	custom := reflect.PointerTo(t).Implements(unmarshalerType)
	if custom && n.Kind != yaml.MappingNode && n.Kind != yaml.SequenceNode {
		return // a scalar its own decoder reads
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind == yaml.MappingNode {
			c.walkStruct(n, t, path, depth)
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				c.walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), nil, depth+1)
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, e := range n.Content {
				c.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), nil, depth+1)
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if t != durationType {
			c.whole(n, path, hint)
		}
	}
}

func (c *checker) walkStruct(n *yaml.Node, t reflect.Type, path string, depth int) {
	var hinter FractionHinter
	if t.Implements(hinterType) {
		hinter = reflect.Zero(t).Interface().(FractionHinter)
	}
	sibling := func(key string) string {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key && n.Content[i+1].Kind == yaml.ScalarNode {
				return n.Content[i+1].Value
			}
		}
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		ft, ok := fieldByKey(t, key)
		if !ok {
			continue // yaml.v3 reports unknown fields
		}
		var hint func(float64) string
		if hinter != nil {
			hint = func(v float64) string { return hinter.FractionHint(key, v, sibling) }
		}
		c.walk(n.Content[i+1], ft, join(path, key), hint, depth+1)
	}
}

// whole reports a scalar with a fractional part given for a whole number.
func (c *checker) whole(n *yaml.Node, path string, hint func(float64) string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
		return
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err == nil && v == math.Trunc(v) && !math.IsInf(v, 0) {
		return // 10.0 and 1e3 are whole
	}
	msg := fmt.Sprintf("%s is not a whole number", n.Value)
	if hint != nil && err == nil && v > 0 && !math.IsInf(v, 0) {
		if h := hint(v); h != "" {
			msg += ": " + h
		}
	}
	c.errs = append(c.errs, &configerr.Error{File: c.name, Line: n.Line, Field: path, Err: fmt.Errorf("%s", msg)})
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Multiple is the smallest k in 1..1000 that makes v*k whole, and v*k; 0
// and 0 when there is none. FractionHint implementations use it.
func Multiple(v float64) (k, whole int64) {
	for k := int64(1); k <= 1000; k++ {
		w := v * float64(k)
		if r := math.Round(w); math.Abs(w-r) < 1e-9*math.Max(1, w) && r >= 1 {
			return k, int64(r)
		}
	}
	return 0, 0
}

// expected says in the user's words what a value of type t is written as.
func expected(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		return "a duration (like 50ms, 2s, 1m)"
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "a list (like [a, b], or one item)"
	case reflect.Map, reflect.Struct:
		return "a mapping (key: value lines, or {key: value})"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "text"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a whole number"
}

// given says in the user's words what a YAML tag is.
func given(tag string) string {
	switch tag {
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	case "!!int":
		return "a whole number"
	case "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	case "!!null":
		return "nothing"
	case "!!str":
		return "text"
	}
	return "a value tagged " + tag
}

var cannotUnmarshal = regexp.MustCompile("(?s)^cannot unmarshal (\\S+)(?: `.*?`)? into (.+)$")

// typeError rewrites yaml.v3's "cannot unmarshal !!str `x` into
// []string", which names Go's types, as "expected a list (...), not text",
// and names the field from the types noted on the line.
func (c *checker) typeError(e *configerr.Error) {
	m := cannotUnmarshal.FindStringSubmatch(e.Err.Error())
	if m == nil {
		return
	}
	want := ""
	if c != nil {
		for _, tn := range c.byLine[e.Line] {
			if tn.t.String() == m[2] {
				e.Field, want = tn.path, expected(tn.t)
				break
			}
		}
	}
	if want == "" {
		want = expectedName(m[2])
	}
	e.Err = fmt.Errorf("expected %s, not %s", want, given(m[1]))
}

// customAt is the deepest field on line whose type has its own decoder:
// the one a message of that decoder is about.
func (c *checker) customAt(line int) string {
	path := ""
	for _, tn := range c.byLine[line] {
		if reflect.PointerTo(tn.t).Implements(unmarshalerType) {
			path = tn.path
		}
	}
	return path
}

// expectedName is expected for a type known by its name alone.
func expectedName(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return expected(reflect.TypeFor[[]string]())
	case strings.HasPrefix(t, "map["):
		return expected(reflect.TypeFor[map[string]string]())
	case t == "bool":
		return expected(reflect.TypeFor[bool]())
	case t == "string":
		return expected(reflect.TypeFor[string]())
	case t == "time.Duration":
		return expected(durationType)
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return expected(reflect.TypeFor[int]())
	case strings.HasPrefix(t, "float"):
		return expected(reflect.TypeFor[float64]())
	}
	return expected(reflect.TypeFor[struct{}]())
}

// maxRelocate bounds the lines relocate parses again.
const maxRelocate = 1000

// relocate finds the line that breaks the document when yaml.v3 reports
// the start of the block it broke. (An indentation error in a list that
// starts on line 2 is "line 2: did not find expected '-' indicator".) It
// is the first line after the longest start of the document that parses,
// or line unchanged when that is no later.
func relocate(data []byte, line int) int {
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) > maxRelocate {
		return line
	}
	for j := len(lines) - 1; j >= line; j-- {
		var n yaml.Node
		if yaml.Unmarshal([]byte(strings.Join(lines[:j], "")), &n) == nil {
			return j + 1
		}
	}
	return line
}
