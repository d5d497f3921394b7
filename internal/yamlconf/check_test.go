package yamlconf_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/configerr"
	"github.com/ratekeeper/ratekeeper/internal/yamlconf"
)

// TestSyntaxErrorOnItsLine: a line that breaks a block is reported on
// that line, not on the block's first, which yaml.v3 names; an error that
// yaml.v3 places right keeps its line, a flow list over several lines too.
func TestSyntaxErrorOnItsLine(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"a:\n  - x: 1\n  - y: 2\n   - z: 3\n", "f.yaml:4: check this line's indentation: it breaks the block that starts on line"},
		{"a:\n  b: 1\n c: 2\n", "f.yaml:3: check this line's indentation"},
		{"a:\n  b: 1\n    c: 2\n", "f.yaml:3: mapping values are not allowed"},
		{"a: [1,\n 2]\nb:\n  c: 1\n d: 2\n", "f.yaml:5: check this line's indentation"},
		{"a: [1,\n 2\nb: 3\n", "f.yaml:2: did not find expected ',' or ']'"},
	} {
		var v map[string]any
		_, err := yamlconf.Decode("f.yaml", []byte(tt.yaml), &v, none)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant %s...", tt.yaml, err, tt.want)
		}
	}
}

func none() []*configerr.Error { return nil }

type fuzzed struct {
	N     int             `yaml:"n"`
	L     []string        `yaml:"l"`
	M     map[string]int  `yaml:"m"`
	S     struct{ X int } `yaml:"s"`
	B     bool            `yaml:"b"`
	Items []struct {
		K string `yaml:"k"`
		V uint32 `yaml:"v"`
	} `yaml:"items"`
}

var goType = regexp.MustCompile(`cannot unmarshal|not found in type|yaml_test\.|\[\]string|map\[`)

// FuzzDecode: any bytes decode without a panic, every message is in the
// user's words, and a fraction never reaches a whole number silently.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"n: 1.5\n", "l: x\n", "m: {a: 2.5}\n", "s: {x: .5}\n", "items:\n  - {k: a, v: 1e3}\n  - v: 3.25\n", "b: maybe\n", "n: [1]\nl: {a: b}\n", "a:\n - b\n  - c\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v fuzzed
		_, err := yamlconf.Decode("f.yaml", []byte(s), &v, none)
		if err != nil {
			if m := goType.FindString(err.Error()); m != "" {
				t.Fatalf("%q: message holds %q: %v", s, m, err)
			}
			return
		}
		if strings.Contains(s, ".5") && (v.N != 0 || v.S.X != 0) && !strings.Contains(s, "#") && !strings.Contains(s, "\"") && !strings.Contains(s, "'") {
			// A whole value decoded from a text holding .5 must have been
			// written whole elsewhere (10.50 is not whole either).
			for _, w := range []string{"n: 0.5", "n: 1.5", "x: .5", "x: 0.5"} {
				if strings.Contains(s, w+"\n") {
					t.Fatalf("%q decoded as %+v", s, v)
				}
			}
		}
	})
}
