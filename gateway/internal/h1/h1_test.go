package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
)

// fuzzWant are the header names the parser tests ask ParseRequest for.
var fuzzWant = []string{"X-User-Id", "X-Forwarded-For", "Forwarded", "Proxy-Authorization"}

// hopByHop are the hop-by-hop headers of a head ParseRequest takes: the
// upstream never receives them, so the rules must not read them either.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Http2-Settings"}

// FuzzParseRequest checks the fast path's request reader against
// net/http's: every head ParseRequest takes, http.ReadRequest takes too,
// with the same method, target, path, host, length, connection close and
// header values, and the same number of bytes. The two must never
// disagree on where a request ends: that is how requests are smuggled.
func FuzzParseRequest(f *testing.F) {
	for _, s := range h1test.Requests() {
		f.Add([]byte(s))
	}
	var h ReqHead
	f.Fuzz(func(t *testing.T, b []byte) {
		if ParseRequest(b, &h, fuzzWant) != Parsed {
			return
		}
		checkSameAsNetHTTP(t, b, &h)
	})
}

func checkSameAsNetHTTP(t *testing.T, b []byte, h *ReqHead) {
	t.Helper()
	if h.N+h.ContentLength > len(b) {
		return // Parsed, but the body is still to come
	}
	src := bytes.NewReader(b)
	br := bufio.NewReader(src)
	req, err := http.ReadRequest(br)
	if err != nil {
		t.Fatalf("fast path takes %q; net/http refuses it: %v", b, err)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatalf("%q: net/http cannot read the body: %v", b, err)
	}
	used := len(b) - src.Len() - br.Buffered()
	if used != h.N+h.ContentLength || len(body) != h.ContentLength {
		t.Fatalf("%q: fast path reads %d+%d bytes, net/http %d (body %d)", b, h.N, h.ContentLength, used, len(body))
	}
	path, ok := unescapePath(h.Path)
	switch {
	case req.Method != h.Method:
		t.Fatalf("%q: method %q, net/http %q", b, h.Method, req.Method)
	case req.RequestURI != string(h.Target):
		t.Fatalf("%q: target %q, net/http %q", b, h.Target, req.RequestURI)
	case !ok || req.URL.Path != path:
		t.Fatalf("%q: path %q (%v), net/http %q", b, path, ok, req.URL.Path)
	case req.Host != string(h.Host):
		t.Fatalf("%q: host %q, net/http %q", b, h.Host, req.Host)
	case req.Close != h.Close:
		t.Fatalf("%q: close %v, net/http %v", b, h.Close, req.Close)
	case req.ContentLength != int64(h.ContentLength) && !(req.ContentLength == -1 && h.ContentLength == 0):
		t.Fatalf("%q: length %d, net/http %d", b, h.ContentLength, req.ContentLength)
	}
	for k, name := range fuzzWant {
		var got []string
		for _, s := range h.Want[k] {
			got = append(got, string(b[s.Start:s.End]))
		}
		want := req.Header[name]
		if slices.Contains(hopByHop, name) {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q: %s %q, net/http %q", b, name, got, want)
		}
	}
	// The forwarded lines are every header net/http saw, but those the
	// proxy drops or writes itself.
	fwd := http.Header{}
	for _, s := range h.Lines {
		line := string(b[s.Start:s.End])
		name, value, _ := strings.Cut(line, ":")
		fwd.Add(name, strings.Trim(value, " \t\r\n"))
	}
	want := req.Header.Clone()
	for _, k := range append(hopByHop, "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto") {
		want.Del(k)
	}
	for k := range want {
		if strings.Contains(k, "_") {
			delete(want, k) // dropped on both paths, as nginx drops it
		}
	}
	if len(fwd) != len(want) {
		t.Fatalf("%q: forwards %v, net/http read %v", b, fwd, want)
	}
	for k, vs := range want {
		if !slices.Equal(fwd[k], vs) {
			t.Fatalf("%q: forwards %s %q, net/http read %q", b, k, fwd[k], vs)
		}
	}
}

// TestParseRequestSeeds pins what the fast path takes and hands off, and
// that every head it takes is read alike by net/http.
func TestParseRequestSeeds(t *testing.T) {
	var h ReqHead
	taken := 0
	for i, s := range h1test.Requests() {
		res := ParseRequest([]byte(s), &h, fuzzWant)
		wantTaken := i < len(h1test.PlainRequests)
		if (res == Parsed) != wantTaken {
			t.Errorf("%q: result %d, want taken %v", s, res, wantTaken)
			continue
		}
		if res == Parsed {
			taken++
			checkSameAsNetHTTP(t, []byte(s), &h)
		}
	}
	if taken != len(h1test.PlainRequests) {
		t.Errorf("%d seeds taken, want %d", taken, len(h1test.PlainRequests))
	}
}

// TestParseRequestIncremental feeds heads a byte at a time: a prefix is
// never taken, and hand-off never waits for bytes that cannot help.
func TestParseRequestIncremental(t *testing.T) {
	var h ReqHead
	for _, s := range h1test.PlainRequests {
		full := []byte(s)
		ParseRequest(full, &h, fuzzWant)
		n := h.N
		for k := 0; k < n; k++ {
			if res := ParseRequest(full[:k], &h, fuzzWant); res != NeedMore {
				t.Fatalf("%q: the first %d bytes give %d, want NeedMore", s, k, res)
			}
		}
		if res := ParseRequest(full[:n], &h, fuzzWant); res != Parsed || h.N != n {
			t.Fatalf("%q: the whole head gives %d (n %d), want Parsed with n %d", s, res, h.N, n)
		}
	}
	// A line that can no longer become plain is handed off at once.
	if res := ParseRequest([]byte("GET / HTTP/1.0\r\n"), &h, nil); res != HandOff {
		t.Errorf("HTTP/1.0 request line: %d, want HandOff", res)
	}
	if res := ParseRequest([]byte("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"), &h, nil); res != HandOff {
		t.Errorf("Transfer-Encoding: %d, want HandOff", res)
	}
}

// FuzzParseResponse checks the fast path's response reader against
// net/http's: a head it takes, http.ReadResponse takes, with the same
// status and framing.
func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nbody",
		"HTTP/1.1 204 No Content\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 999 Odd\nX: y\n\n",
	} {
		f.Add([]byte(s))
	}
	var h RespHead
	f.Fuzz(func(t *testing.T, b []byte) {
		end := bytes.Index(b, []byte("\n\r\n"))
		if e := bytes.Index(b, []byte("\n\n")); e >= 0 && (end < 0 || e < end) {
			end = e - 1
		}
		if end < 0 {
			return
		}
		head := b[:end+bytes.IndexByte(b[end+1:], '\n')+2]
		if ParseResponse(head, &h) != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatalf("fast path takes %q; net/http refuses it: %v", head, err)
		}
		if resp.StatusCode != h.Code {
			t.Fatalf("%q: status %d, net/http %d", head, h.Code, resp.StatusCode)
		}
		chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
		if chunked != h.Chunked {
			t.Fatalf("%q: chunked %v, net/http %v", head, h.Chunked, chunked)
		}
		if !h.Chunked && h.Code >= 200 && h.Code != 204 && h.Code != 304 && resp.ContentLength != h.ContentLength {
			t.Fatalf("%q: length %d, net/http %d", head, h.ContentLength, resp.ContentLength)
		}
	})
}

// unescapePath is the path as net/http's URL.Path holds it; ok is false
// when net/url would refuse it.
func unescapePath(p []byte) (string, bool) {
	if bytes.IndexByte(p, '%') < 0 {
		return string(p), true
	}
	s, err := url.PathUnescape(string(p))
	return s, err == nil
}
