package jsonmeter

import (
	"strings"
	"testing"
)

// A model writes a tool call's input as a JSON object (Anthropic's
// tool_use, Gemini's functionCall.args), before the usage. A client that
// asks for input nested deeper than MaxNesting must not make the whole
// response unreadable, and so cost only the rule's default: the deep part
// is passed over, and the usage after it is read.
func TestDeepNestingBeforeUsageIsPassedOver(t *testing.T) {
	ps := paths(t, "usage.total_tokens")
	deep := strings.Repeat(`{"a":[`, MaxNesting) + `"x\"]}{[", 1` + strings.Repeat(`]}`, MaxNesting)
	body := `{"content":[{"type":"tool_use","input":` + deep + `}],"usage":{"total_tokens":30000}}`
	want := Reading{Sum: 30000, Seen: true}
	if got := read(ps, false, []byte(body)); got != want {
		t.Errorf("JSON body: %+v, want %+v", got, want)
	}
	// Byte by byte, so each state is crossed at a chunk's edge.
	var chunks [][]byte
	for i := range len(body) {
		chunks = append(chunks, []byte{body[i]})
	}
	if got := read(ps, false, chunks...); got != want {
		t.Errorf("JSON body, byte by byte: %+v, want %+v", got, want)
	}
	if got := read(ps, true, []byte("data: "+body+"\n\n")); got != want {
		t.Errorf("event stream: %+v, want %+v", got, want)
	}
	// Unclosed, it is still not one whole JSON value.
	if got := read(ps, false, []byte(`{"x":`+strings.Repeat("[", 2*MaxNesting))); !got.Bad {
		t.Errorf("unclosed deep nesting: %+v, want bad", got)
	}
}
