package httplimit

import (
	"io"
	"net/http"
	"strconv"
	"testing"
)

// unwrapper wraps a writer, with Unwrap, as a handler between Handler
// and the one that answers may.
type unwrapper struct{ http.ResponseWriter }

func (w unwrapper) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestUnserved: an answer the handler marks as its own before its head
// settles at the default, through a wrapping writer too. Marked after the
// head, or not marked, an answer without usage keeps its reserve.
func TestUnserved(t *testing.T) {
	f := newFixture(t, `rules:
  - name: llm
    key: [header:X-User]
    cost: {response_json: usage.total_tokens, max: 800, default: 20, reserve: 300}
    limit: {algorithm: token_bucket, rate: 1, period: 1h, burst: 1000}
  - name: hdr
    key: [header:X-User]
    cost: {response_header: X-Cost, max: 800, default: 30, reserve: 300}
    limit: {algorithm: token_bucket, rate: 1, period: 1h, burst: 1000}
`)
	var answer func(w http.ResponseWriter)
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answer(w) }))
	// cost is what user's last request cost: the larger of the two rules'
	// charges, whose remaining is reported (both reserve 300 for the probe).
	cost := func(user string) int {
		answer = func(w http.ResponseWriter) {
			w.Header().Set("X-Cost", "0")
			io.WriteString(w, `{"usage":{"total_tokens":0}}`)
		}
		w := f.do("POST", "/", "192.0.2.1", "X-User", user)
		n, _ := strconv.Atoi(w.Header().Get(HeaderRemaining))
		return 1000 - 300 - n
	}
	badGateway := func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, `{"title":"Bad Gateway"}`)
	}
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		cost   int
	}{
		{"marked", func(w http.ResponseWriter) { Unserved(w); badGateway(w) }, 30},
		{"marked through a wrapper", func(w http.ResponseWriter) { Unserved(unwrapper{w}); badGateway(unwrapper{w}) }, 30},
		{"marked after the head", func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway); Unserved(w) }, 300},
		{"not marked", badGateway, 300},
	} {
		answer = tc.answer
		f.do("POST", "/", "192.0.2.1", "X-User", tc.name)
		if got := cost(tc.name); got != tc.cost {
			t.Errorf("%s: cost %d, want %d", tc.name, got, tc.cost)
		}
	}
	Unserved(nil) // no writer: nothing to mark
}
