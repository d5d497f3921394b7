package jsonmeter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func paths(t testing.TB, ss ...string) []Path {
	t.Helper()
	var ps []Path
	for _, s := range ss {
		p, err := ParsePath(s)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

func read(ps []Path, events bool, chunks ...[]byte) Reading {
	m := New(ps, events)
	for _, c := range chunks {
		m.Write(c)
	}
	m.End()
	return m.Reading()
}

func TestJSONBody(t *testing.T) {
	ps := paths(t, "usage.total_tokens")
	for _, tc := range []struct {
		body string
		want Reading
	}{
		{`{"usage":{"total_tokens":42}}`, Reading{Sum: 42, Seen: true}},
		{` {"id":"x","choices":[{"usage":{"total_tokens":9}}],"usage":{"prompt_tokens":1,"total_tokens":7}} `, Reading{Sum: 7, Seen: true}},
		{`{"note":"{\"usage\":{\"total_tokens\":0}}","usage":{"total_tokens":5}}`, Reading{Sum: 5, Seen: true}},
		{`{"usage":{"total_tokens":3,"total_tokens":900}}`, Reading{Sum: 900, Seen: true}},
		{`{"usage":{"total_tokens":900,"total_tokens":3}}`, Reading{Sum: 900, Seen: true}},
		{`{"usage":{"total\u005ftokens":8}}`, Reading{Sum: 8, Seen: true}},
		{`{"usage":{"total_tokens":2.1}}`, Reading{Sum: 3, Seen: true}},
		{`{"usage":{"total_tokens":1e400}}`, Reading{Sum: 1 << 53, Seen: true}},
		{`{"usage":{"total_tokens":99999999999999999999999}}`, Reading{Sum: 1 << 53, Seen: true}},
		{`{"usage":{"total_tokens":null}}`, Reading{}},
		{`{"usage":null}`, Reading{}},
		{`{"other":1}`, Reading{}},
		{`[{"usage":{"total_tokens":4}}]`, Reading{}},
		{`{"usage":{"total_tokens":-5}}`, Reading{Bad: true}},
		{`{"usage":{"total_tokens":"50"}}`, Reading{Bad: true}},
		{`{"usage":{"total_tokens":true}}`, Reading{Bad: true}},
		{`{"usage":{"total_tokens":{"n":1}}}`, Reading{Bad: true}},
		{`{"usage":{"total_tokens":NaN}}`, Reading{Bad: true}},
		{`{"usage":{"total_tokens":` + strings.Repeat("1", 70) + `}}`, Reading{Bad: true}},
		{`{"usage":{"total_tokens":12}`, Reading{Sum: 12, Seen: true, Bad: true}},
		{`{"usage":{"total_tokens":12}} {}`, Reading{Sum: 12, Seen: true, Bad: true}},
		{`<html>502</html>`, Reading{Bad: true}},
		{``, Reading{}},
		{` `, Reading{Bad: true}},
		{strings.Repeat("[", MaxNesting+1) + strings.Repeat("]", MaxNesting+1), Reading{}}, // passed over: TestDeepNestingBeforeUsageIsPassedOver
	} {
		if got := read(ps, false, []byte(tc.body)); got != tc.want {
			t.Errorf("%.80s: %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

// An OpenAI-compatible stream: usage in the last event before [DONE].
const openAIStream = "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n" +
	": keep-alive\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"lo \\\"usage\\\": 1\"}}],\"usage\":null}\n\n" +
	"event: message\r\nid: 7\r\ndata: {\"choices\":[],\r\ndata:  \"usage\":{\"prompt_tokens\":5,\"total_tokens\":17}}\r\n\r\n" +
	"data: [DONE]\n\n"

// Anthropic-like: input and output tokens in different events, output
// cumulative.
const twoPathStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
	"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":10}}\n\n" +
	"event: message_delta\rdata:{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\r\r" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func TestEventStream(t *testing.T) {
	if got, want := read(paths(t, "usage.total_tokens"), true, []byte(openAIStream)), (Reading{Sum: 17, Seen: true}); got != want {
		t.Errorf("OpenAI stream: %+v, want %+v", got, want)
	}
	two := paths(t, "message.usage.input_tokens", "usage.output_tokens")
	if got, want := read(two, true, []byte(twoPathStream)), (Reading{Sum: 40, Seen: true}); got != want {
		t.Errorf("two paths: %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		stream string
		want   Reading
	}{
		{"data: {\"usage\":{\"total_tokens\":4}}\n\ndata: {\"usage\":{\"total_tokens\":3}}\n\n", Reading{Sum: 3, Seen: true}},
		{"data: {\"usage\":{\"total_tokens\":4}}\n\ndata: {\"usage\":{\"total_tokens\":\"lots\"}}\n\n", Reading{Sum: 4, Seen: true, Bad: true}},
		{"data: not json\n\ndata: {\"usage\":{\"total_tokens\":4}}\n\n", Reading{Sum: 4, Seen: true}},
		{"data: {\"usage\":{\"total_tokens\":4}} trailing\n\n", Reading{Sum: 4, Seen: true}},
		{"data: {\"usage\":{\"total_tokens\":4", Reading{}}, // the number may go on
		{"data: {\"usage\":{\"total_tokens\":4}\n\n", Reading{Sum: 4, Seen: true}},
		{"dat: {\"usage\":{\"total_tokens\":4}}\n\n", Reading{}},
		{"data2: {\"usage\":{\"total_tokens\":4}}\n\n", Reading{}},
		{"data:{\"usage\":\n\n{\"total_tokens\":4}}\n\n", Reading{}},
		{"data\ndata: {\"usage\":{\"total_tokens\":4}}\n\n", Reading{Sum: 4, Seen: true}},
		{"data: {\"usage\":{\"total_tokens\":-1}}\n\n", Reading{Bad: true}},
	} {
		if got := read(paths(t, "usage.total_tokens"), true, []byte(tc.stream)); got != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.stream, got, tc.want)
		}
	}
}

// TestSplitAnywhere: a body read in two pieces split at any byte, or byte
// by byte, reads as in one piece.
func TestSplitAnywhere(t *testing.T) {
	two := paths(t, "message.usage.input_tokens", "usage.output_tokens", "usage.total_tokens")
	for _, tc := range []struct {
		body   string
		events bool
	}{
		{openAIStream, true},
		{twoPathStream, true},
		{`{"id":"x","usage":{"total_tokens":123,"k\u0065y":[1,2.5e3,{"a":"\ud83d\ude00"}]},"t":true,"f":false,"n":null}`, false},
	} {
		whole := read(two, tc.events, []byte(tc.body))
		if !whole.Seen || whole.Bad {
			t.Fatalf("%q: %+v", tc.body, whole)
		}
		for i := range len(tc.body) + 1 {
			if got := read(two, tc.events, []byte(tc.body[:i]), []byte(tc.body[i:])); got != whole {
				t.Fatalf("split at %d: %+v, want %+v", i, got, whole)
			}
		}
		var bytewise [][]byte
		for i := range len(tc.body) {
			bytewise = append(bytewise, []byte{tc.body[i]})
		}
		if got := read(two, tc.events, bytewise...); got != whole {
			t.Fatalf("byte by byte: %+v, want %+v", got, whole)
		}
	}
}

func TestParsePath(t *testing.T) {
	for _, s := range []string{"", ".", "a.", ".a", "a..b", "a b", `a"b`, `a\b`, "é", strings.Repeat("a.", MaxPathKeys) + "a", strings.Repeat("k", MaxKey+1)} {
		if _, err := ParsePath(s); err == nil {
			t.Errorf("ParsePath(%q) took it", s)
		}
	}
	if p, err := ParsePath("usage.total_tokens"); err != nil || p.String() != "usage.total_tokens" || len(p) != 2 {
		t.Errorf("ParsePath: %v, %v", p, err)
	}
}

// reference reads b as Meter does, with encoding/json's tokenizer; ok is
// false when b is past Meter's bounds.
func reference(ps []Path, b []byte) (r Reading, ok bool) {
	if !json.Valid(b) {
		return Reading{Bad: true}, true
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	type frame struct {
		obj    bool
		key    string
		gotKey bool
	}
	var stack []frame
	last := make([]int64, len(ps))
	saw := make([]bool, len(ps))
	at := func() (keys []string, objs bool) {
		for _, f := range stack {
			if !f.obj {
				return nil, false
			}
			keys = append(keys, f.key)
		}
		return keys, true
	}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Reading{}, false
		}
		if len(stack) > 0 && stack[len(stack)-1].obj && !stack[len(stack)-1].gotKey {
			if k, isKey := tok.(string); isKey {
				stack[len(stack)-1].key, stack[len(stack)-1].gotKey = k, true
				continue
			}
		}
		if dl, isDelim := tok.(json.Delim); isDelim && (dl == '}' || dl == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				stack[len(stack)-1].gotKey = false
			}
			continue
		}
		keys, objs := at()
		for i, p := range ps {
			if !objs || strings.Join(keys, "\x00") != strings.Join(p, "\x00") {
				continue
			}
			switch v := tok.(type) {
			case nil:
			case json.Number:
				if len(v) > MaxNumber {
					return Reading{}, false
				}
				n, good := number([]byte(v))
				if !good {
					r.Bad = true
					continue
				}
				if saw[i] {
					n = max(n, last[i])
				}
				last[i], saw[i] = n, true
			default:
				r.Bad = true
			}
		}
		if dl, isDelim := tok.(json.Delim); isDelim {
			if len(stack) == MaxNesting {
				return Reading{}, false
			}
			stack = append(stack, frame{obj: dl == '{'})
			continue
		}
		if len(stack) > 0 {
			stack[len(stack)-1].gotKey = false
		}
	}
	for i := range ps {
		if saw[i] {
			r.Seen = true
			r.Sum = min(r.Sum+last[i], 1<<53)
		}
	}
	return r, true
}

// FuzzMeter holds Meter to encoding/json on any body, read whole, split,
// and as the one event of an event stream.
func FuzzMeter(f *testing.F) {
	for _, s := range []string{
		`{"usage":{"total_tokens":42}}`, `{"a":{"b":1,"b":2},"a":3}`, `{"x":{"y":{"z":-0.5e-3}}}`,
		`[{"a":1}]`, `{"a":"\u0041\"","b":[true,false,null]}`, `{"a":1e999}`, `  7 `, `"s"`,
		`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `{"a":"` + "\x01" + `"}`,
		`{"\u00e9":1}`, `{"a":[1,2,{"b":3}]}`, "{\"a\":\xff}", `{"a":1}}`, `{"usage":{"total_tokens":"1"}}`,
	} {
		f.Add([]byte(s), uint16(3))
	}
	ps := paths(f, "usage.total_tokens", "a", "a.b", "x.y.z")
	f.Fuzz(func(t *testing.T, b []byte, at uint16) {
		if len(b) == 0 {
			return // no body: not bad, where encoding/json finds no value
		}
		got := read(ps, false, b)
		i := int(at) % (len(b) + 1)
		if split := read(ps, false, b[:i], b[i:]); split != got {
			t.Fatalf("split at %d: %+v, whole %+v", i, split, got)
		}
		want, ok := reference(ps, b)
		if !ok {
			return
		}
		if !want.Bad {
			if got != want {
				t.Fatalf("%q: %+v, encoding/json reads %+v", b, got, want)
			}
			event := bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r"), []byte("\n")), []byte("\n"), []byte("\ndata: "))
			stream := append(append([]byte("data: "), event...), "\n\ndata: [DONE]\n\n"...)
			if got := read(ps, true, stream); got != want {
				t.Fatalf("as an event %q: %+v, encoding/json reads %+v", stream, got, want)
			}
		} else if !got.Bad {
			t.Fatalf("%q: %+v, but encoding/json finds it bad", b, got)
		}
	})
}

// BenchmarkMeter is the Meter alone on an event stream of 2 KiB content
// events and on a JSON body of long strings, per byte (MB/s).
func BenchmarkMeter(b *testing.B) {
	event := "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("x", 1940) + "\"}}],\"usage\":null}\n\n"
	stream := []byte(strings.Repeat(event, 512) + "data: {\"usage\":{\"total_tokens\":102}}\n\ndata: [DONE]\n\n")
	body := []byte(`{"choices":[` + strings.Repeat(`{"message":{"content":"`+strings.Repeat("lorem ipsum ", 150)+`"}},`, 500) + `{}],"usage":{"total_tokens":102}}`)
	ps := paths(b, "usage.total_tokens")
	for _, tc := range []struct {
		name   string
		b      []byte
		events bool
	}{{"stream", stream, true}, {"json", body, false}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.b)))
			b.ReportAllocs()
			for b.Loop() {
				m := New(ps, tc.events)
				for p := tc.b; len(p) > 0; p = p[min(len(p), 32<<10):] {
					m.Write(p[:min(len(p), 32<<10)])
				}
				m.End()
				if r := m.Reading(); r.Sum != 102 || r.Bad {
					b.Fatal(r)
				}
			}
		})
	}
}

// TestRawByteAttacks: bodies built to exhaust a reader are read with no
// allocation, and give no number or a bad reading, never a wrong one.
func TestRawByteAttacks(t *testing.T) {
	ps := paths(t, "usage.total_tokens", "a")
	big := func(s string, n int) []byte { return bytes.Repeat([]byte(s), n) }
	for _, tc := range []struct {
		name   string
		body   []byte
		events bool
		want   Reading
	}{
		{"deep nesting", big("[", 1<<18), false, Reading{Bad: true}},
		{"deep objects", big(`{"a":`, 1<<18), false, Reading{Bad: true}},
		{"long key", append(append([]byte(`{"`), big("k", 1<<18)...), `":1,"a":2}`...), false, Reading{Sum: 2, Seen: true}},
		{"long string", append(append([]byte(`{"x":"`), big("\\u0000\\\"", 1<<18)...), `","a":3}`...), false, Reading{Sum: 3, Seen: true}},
		{"long number", append(append([]byte(`{"a":`), big("9", 1<<18)...), '}'), false, Reading{Bad: true}},
		{"long number elsewhere", append(append([]byte(`{"b":`), big("9", 1<<18)...), `,"a":4}`...), false, Reading{Sum: 4, Seen: true}},
		{"many keys", append(append([]byte(`{`), big(`"a":1,`, 1<<18)...), `"a":5}`...), false, Reading{Sum: 5, Seen: true}},
		{"NUL and invalid UTF-8", []byte("{\"a\":1}\x00\xff\xfe"), false, Reading{Sum: 1, Seen: true, Bad: true}},
		{"byte order mark", []byte("\xef\xbb\xbf{\"a\":1}"), false, Reading{Bad: true}},
		{"endless line", append([]byte("data: "), big("x", 1<<18)...), true, Reading{}},
		{"endless field name", big("d", 1<<18), true, Reading{}},
		{"endless event", append(big("data: {\"b\":\n", 1<<16), "\n"...), true, Reading{}},
		{"blank lines", big("\r\n\r\r\n\n", 1<<18), true, Reading{}},
		{"NUL in events", append(big("data: \x00\n\n", 1<<16), "data: {\"a\":6}\n\n"...), true, Reading{Sum: 6, Seen: true}},
	} {
		var got Reading
		allocs := testing.AllocsPerRun(1, func() {
			got = read(ps, tc.events, tc.body)
		})
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		if allocs > 1 { // New's Meter
			t.Errorf("%s: %v allocations", tc.name, allocs)
		}
	}
}

// FuzzEvents: any bytes as an event stream, in any two pieces, read the
// same, within bounds.
func FuzzEvents(f *testing.F) {
	f.Add([]byte(openAIStream), uint16(40))
	f.Add([]byte(twoPathStream), uint16(7))
	f.Add([]byte("data: {\"a\":1}\r\rdata:{\"a\":-1}\n\n"), uint16(3))
	ps := paths(f, "usage.total_tokens", "message.usage.input_tokens", "usage.output_tokens", "a")
	f.Fuzz(func(t *testing.T, b []byte, at uint16) {
		whole := read(ps, true, b)
		i := int(at) % (len(b) + 1)
		if split := read(ps, true, b[:i], b[i:]); split != whole {
			t.Fatalf("split at %d: %+v, whole %+v", i, split, whole)
		}
		if whole.Sum < 0 || whole.Sum > 1<<53 || whole.Sum != 0 && !whole.Seen {
			t.Fatalf("%+v", whole)
		}
	})
}
