package httplimit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestCostFromBody: the handler's JSON body or event stream gives the
// cost, charged when the handler returns, to the key decided; a handler
// that aborts mid-body (the reverse proxy's panic) charges what it had
// reported, or the default if more.
func TestCostFromBody(t *testing.T) {
	f := newFixture(t, `rules:
  - name: llm
    key: [header:X-User]
    cost: {response_json: [usage.input_tokens, usage.output_tokens], max: 500, default: 20}
    limit: {algorithm: token_bucket, rate: 1, period: 1h, burst: 1000}
`)
	var body, contentType string
	abort := false
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "" {
			t.Error("Accept-Encoding reached the handler")
		}
		w.Header().Set("Content-Type", contentType)
		io.WriteString(w, body)
		if abort {
			panic(http.ErrAbortHandler)
		}
	}))
	left := func(user string) int {
		body, contentType, abort = `{"usage":{"input_tokens":0}}`, "application/json", false
		w := f.do("POST", "/", "192.0.2.1", "X-User", user)
		n, _ := strconv.Atoi(w.Header().Get(HeaderRemaining))
		return n + 1
	}
	for i, tc := range []struct {
		contentType, body string
		abort             bool
		cost              int
	}{
		{"application/json", `{"usage":{"input_tokens":30,"output_tokens":70}}`, false, 100},
		{"application/json", `{"usage":{"input_tokens":3,"output_tokens":4}}`, false, 7},
		{"application/json", `{"usage":{"input_tokens":3,"output_tokens":-4}}`, false, 20},
		{"application/json", `{"usage":{"input_tokens":300,"output_tokens":400}}`, false, 500},
		{"text/event-stream", "data: {\"usage\":{\"input_tokens\":40}}\n\ndata: {\"usage\":{\"output_tokens\":2}}\n\n", false, 42},
		{"text/event-stream", "data: {\"usage\":{\"input_tokens\":40}}\n\n", true, 40},
		{"text/event-stream", "data: {\"usage\":{\"input_tokens\":4}}\n\n", true, 20},
		{"application/json", `{"usage":{"input_tokens":30,"output_tokens":70}}`, true, 100},
	} {
		user := "u" + strconv.Itoa(i)
		body, contentType, abort = tc.body, tc.contentType, tc.abort
		func() {
			defer func() {
				if p := recover(); p != nil && p != http.ErrAbortHandler {
					panic(p)
				}
			}()
			r := httptest.NewRequest("POST", "/", nil)
			r.RemoteAddr = "192.0.2.1:1"
			r.Header.Set("X-User", user)
			r.Header.Set("Accept-Encoding", "gzip")
			f.h.ServeHTTP(httptest.NewRecorder(), r)
		}()
		if got := 1000 - left(user); got != tc.cost {
			t.Errorf("%d: %q abort %v: cost %d, want %d", i, tc.body, tc.abort, got, tc.cost)
		}
	}
}

// TestCostReserve: reserve is taken at admission, so requests in flight
// hold it; the response's cost then settles it, up or down.
func TestCostReserve(t *testing.T) {
	f := newFixture(t, `rules:
  - name: llm
    key: [header:X-User]
    cost: {response_json: usage.total_tokens, max: 800, default: 20, reserve: 300}
    limit: {algorithm: token_bucket, rate: 1, period: 1h, burst: 1000}
`)
	entered, release := make(chan struct{}), make(chan struct{})
	tokens := make(chan string, 8)
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			entered <- struct{}{}
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"total_tokens":`+<-tokens+`}}`)
	}))
	do := func(tok string, hdr ...string) *httptest.ResponseRecorder {
		tokens <- tok
		return f.do("POST", "/", "192.0.2.1", append([]string{"X-User", "ann"}, hdr...)...)
	}
	for _, tc := range []struct {
		tokens    string
		remaining string // at admission: what was left less the reserve
	}{{"100", "700"}, {"500", "600"}, {"0", "100"}} {
		if w := do(tc.tokens); w.Code != 200 || w.Header().Get(HeaderRemaining) != tc.remaining {
			t.Fatalf("%s tokens: %d, remaining %s, want %s", tc.tokens, w.Code, w.Header().Get(HeaderRemaining), tc.remaining)
		}
	}
	// 400 left: one request in flight holds 300; the next cannot reserve.
	done := make(chan int)
	go func() { done <- do("50", "X-Hold", "1").Code }()
	<-entered
	if w := f.do("POST", "/", "192.0.2.1", "X-User", "ann"); w.Code != 429 {
		t.Errorf("a second request while 300 are reserved of 400: %d", w.Code)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("held request: %d", code)
	}
	if w := do("0"); w.Header().Get(HeaderRemaining) != "50" { // 400 - 50, less this one's reserve
		t.Errorf("after settling 50: remaining %s, want 50", w.Header().Get(HeaderRemaining))
	}
}
