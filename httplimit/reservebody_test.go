package httplimit

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

const reserveBodyYAML = `rules:
  - name: tpm
    key: [header:X-User]
    cost: {response_json: usage.total_tokens, max: 4000, default: 10, reserve: {request_json: max_tokens, default: 500}}
    limit: {algorithm: token_bucket, rate: 1, period: 1h, burst: 10000}
`

// bodyRequest is a POST of body for user; chunked hides its length.
func bodyRequest(user string, body []byte, chunked bool, hdr ...string) *http.Request {
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // not a *bytes.Reader: no length
	}
	r := httptest.NewRequest("POST", "/", rd)
	if chunked {
		r.ContentLength = -1
	}
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-User", user)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	io.WriteString(z, s)
	z.Close()
	return b.Bytes()
}

// TestReserveFromRequestBody: the reserve is the request body's
// max_tokens, in 1..max; a body that does not give one reserves the
// default. Either way the handler reads the body sent, byte for byte, and
// the response's cost settles the reserve.
func TestReserveFromRequestBody(t *testing.T) {
	f := newFixture(t, reserveBodyYAML)
	var got []byte
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		if got, err = io.ReadAll(r.Body); err != nil {
			t.Errorf("reading the body: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"total_tokens":`+cmp.Or(r.Header.Get("X-Tokens"), "0")+`}}`)
	}))
	big := []byte(`{"max_tokens":5,"pad":"` + strings.Repeat("x", 10<<20) + `"}`)
	for i, tc := range []struct {
		body    []byte
		chunked bool
		hdr     []string
		reserve int
	}{
		{body: []byte(`{"max_tokens":1200}`), reserve: 1200},
		{body: []byte(`{"model":"m","messages":[{"role":"user","content":"{\"max_tokens\":9}"}],"max_tokens":7}`), reserve: 7},
		{body: []byte(`{"max_tokens":7}`), chunked: true, reserve: 7},
		{body: []byte(`{"max_tokens":2.5}`), reserve: 3},
		{body: []byte(`{"max_tokens":0}`), reserve: 1},
		{body: []byte(`{"max_tokens":99999999999999999999999}`), reserve: 4000},
		{body: []byte(`{"max_tokens":1e300}`), reserve: 4000},
		{body: []byte(`{"max_tokens":-5}`), reserve: 500},
		{body: []byte(`{"max_tokens":"100"}`), reserve: 500},
		{body: []byte(`{"max_tokens":null}`), reserve: 500},
		{body: []byte(`{"max_token":100}`), reserve: 500},
		{body: []byte(`{}`), reserve: 500},
		{body: nil, reserve: 500},
		{body: []byte(`max_tokens=100`), reserve: 500},
		{body: []byte(`{"max_tokens":100`), reserve: 500},
		{body: []byte(`{"max_tokens":100} {"max_tokens":200}`), reserve: 500},
		{body: gzipped(`{"max_tokens":100}`), hdr: []string{"Content-Encoding", "gzip"}, reserve: 500},
		{body: big, reserve: 500},
		{body: big, chunked: true, reserve: 500},
	} {
		user := "u" + strconv.Itoa(i)
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, bodyRequest(user, tc.body, tc.chunked, append([]string{"X-Tokens", "100"}, tc.hdr...)...))
		if w.Code != 200 {
			t.Fatalf("%d: %d %s", i, w.Code, w.Body)
		}
		if r := w.Header().Get(HeaderRemaining); r != strconv.Itoa(10000-tc.reserve) {
			t.Errorf("%d: %.40q: remaining %s at admission, want 10000 less a reserve of %d", i, tc.body, r, tc.reserve)
		}
		if !bytes.Equal(got, tc.body) {
			t.Errorf("%d: the handler read %d bytes (%.40q), not the %d sent", i, len(got), got, len(tc.body))
		}
		// Settled at 100: the next request, reserving 1, sees 10000-100-1.
		w = httptest.NewRecorder()
		f.h.ServeHTTP(w, bodyRequest(user, []byte(`{"max_tokens":1}`), false))
		if r := w.Header().Get(HeaderRemaining); r != "9899" {
			t.Errorf("%d: after settling at 100: remaining %s, want 9899", i, r)
		}
	}
}

// TestReserveFromRequestBodyHeld: requests in flight hold the reserves
// their bodies asked for; one whose reserve does not fit what is left is
// refused, a smaller one passes; settling gives back what was not used.
func TestReserveFromRequestBodyHeld(t *testing.T) {
	f := newFixture(t, strings.NewReplacer("burst: 10000", "burst: 1000", "max: 4000", "max: 1000").Replace(reserveBodyYAML))
	entered, release := make(chan struct{}), make(chan struct{})
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"total_tokens":100}}`)
	}))
	do := func(maxTokens int) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, bodyRequest("ann", []byte(`{"max_tokens":`+strconv.Itoa(maxTokens)+`}`), false))
		return w
	}
	codes := make(chan int, 3)
	for _, n := range []int{400, 400} {
		go func() { codes <- do(n).Code }()
		<-entered
	}
	if w := do(400); w.Code != 429 { // 200 left of 1000
		t.Errorf("a third reserve of 400 with 800 held: %d, want 429", w.Code)
	}
	go func() { codes <- do(200).Code }()
	<-entered
	close(release)
	for range 3 {
		if c := <-codes; c != 200 {
			t.Errorf("a held request: %d", c)
		}
	}
	// Each settled at 100: 700 left, less the next one's reserve.
	go func() { <-entered }()
	if w := do(50); w.Header().Get(HeaderRemaining) != "650" {
		t.Errorf("after settling three at 100: remaining %s, want 650", w.Header().Get(HeaderRemaining))
	}
}

// TestReserveFromRequestBodyCutShort: a response cut short costs at
// least what its request reserved, or what the upstream had reported when
// more.
func TestReserveFromRequestBodyCutShort(t *testing.T) {
	f := newFixture(t, reserveBodyYAML)
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"usage\":{\"total_tokens\":"+cmp.Or(r.Header.Get("X-Tokens"), "0")+"}}\n\n")
		if r.Header.Get("X-Tokens") != "" {
			panic(http.ErrAbortHandler)
		}
	}))
	for i, tc := range []struct {
		maxTokens, reported string
		cost                int
	}{{"1200", "100", 1200}, {"1200", "3000", 3000}, {`"x"`, "100", 500}} {
		user := "cut" + strconv.Itoa(i)
		func() {
			defer func() {
				if p := recover(); p != nil && p != http.ErrAbortHandler {
					panic(p)
				}
			}()
			f.h.ServeHTTP(httptest.NewRecorder(), bodyRequest(user, []byte(`{"max_tokens":`+tc.maxTokens+`}`), false, "X-Tokens", tc.reported))
		}()
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, bodyRequest(user, []byte(`{"max_tokens":1}`), false))
		if r := w.Header().Get(HeaderRemaining); r != strconv.Itoa(10000-tc.cost-1) {
			t.Errorf("%d: reserved %s, reported %s, cut short: remaining %s, want %d", i, tc.maxTokens, tc.reported, r, 10000-tc.cost-1)
		}
	}
}

// TestReserveFromGRPCBody: a gRPC call's stream is not read ahead for a
// reserve: it reserves the default, and its body is the one it came with.
func TestReserveFromGRPCBody(t *testing.T) {
	f := newFixture(t, reserveBodyYAML)
	pr, pw := io.Pipe()
	defer pr.Close() // unblocks the writer
	go func() {
		io.WriteString(pw, `{"max_tokens":7}`)
		pw.Close()
	}()
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != pr {
			t.Errorf("the handler's body is %T, not the call's stream", r.Body)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"total_tokens":0}}`)
	}))
	r := httptest.NewRequest("POST", "/", nil)
	r.Body, r.ContentLength = pr, -1
	r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-User", "grpc")
	r.Header.Set("Content-Type", "application/grpc")
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	if got := w.Header().Get(HeaderRemaining); got != "9500" {
		t.Errorf("remaining %s at admission, want 10000 less the default reserve of 500", got)
	}
}

// FuzzReserveFromBody: whatever the body, in whatever pieces it arrives,
// the reserve is in 1..max, it is the default unless the body is whole
// JSON, and the handler reads the body sent, byte for byte.
func FuzzReserveFromBody(f *testing.F) {
	for _, s := range []string{`{"max_tokens":12}`, `{"max_tokens":-1}`, `{"a":{"max_tokens":3}}`, `[1,2]`, `{"max_tokens":1e999}`, "\x00\xff", `{"max_tokens":3,"max_tokens":9}`} {
		f.Add([]byte(s), uint8(3))
	}
	set := mustSet(f, reserveBodyYAML)
	c := &set.Rules[0].Cost
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		r := httptest.NewRequest("POST", "/", iotest.OneByteReader(bytes.NewReader(body)))
		if piece > 1 {
			r.Body = io.NopCloser(&chunkReader{body: body, n: int(piece)})
		}
		r.ContentLength = -1
		b := peekBody(nil, r, 0)
		n := c.ReserveFrom(b.b, b.whole)
		if n < 1 || n > c.Max {
			t.Fatalf("%q: reserve %d, not in 1..%d", body, n, c.Max)
		}
		if !json.Valid(body) && n != c.Reserve {
			t.Errorf("%q is not JSON: reserve %d, want the default %d", body, n, c.Reserve)
		}
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%q: the handler read %q, %v", body, got, err)
		}
	})
}

// chunkReader reads body n bytes at a time.
type chunkReader struct {
	body []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.body) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.body)
	c.body = c.body[k:]
	return k, nil
}

// BenchmarkReserveFromBody is the cost of reading a 4 KiB chat request's
// max_tokens before the decision: peekBody and ReserveFrom.
func BenchmarkReserveFromBody(b *testing.B) {
	set := mustSet(b, reserveBodyYAML)
	c := &set.Rules[0].Cost
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("w", 4000) + `"}],"max_tokens":700}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := &http.Request{Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Header: http.Header{}}
		pb := peekBody(nil, r, 0)
		if n := c.ReserveFrom(pb.b, pb.whole); n != 700 {
			b.Fatal(n)
		}
	}
}
