package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// fuzzWant are the header names the parser tests ask parseRequest for.
var fuzzWant = []string{"X-User-Id", "X-Forwarded-For", "Forwarded"}

// requestSeeds are heads the fast path must take, and heads it must not.
var requestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET /v1/items/7?x=1&y=%20 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\nX-User-ID: alice\r\n\r\n",
	"POST /v1/posts HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
	"GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\nKeep-Alive: timeout=5\r\n\r\n",
	"GET /%41%2F HTTP/1.1\r\nHost: [::1]:80\r\nX-Forwarded-For: 1.2.3.4\r\nx-forwarded-for: 5.6.7.8, 9.9.9.9\r\nForwarded: for=1.2.3.4\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nX-Obs: caf\xc3\xa9\r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\n",
	"PATCH /a HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	// Heads that must go to net/http.
	"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Secret\r\nX-Secret: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n\r\n",
	"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a|b HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: \rb\r\n\r\n",
}

// FuzzParseRequest checks the fast path's request reader against
// net/http's: every head parseRequest takes, http.ReadRequest takes too,
// with the same method, target, path, host, length, connection close and
// header values, and the same number of bytes. The two must never
// disagree on where a request ends: that is how requests are smuggled.
func FuzzParseRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	var h reqHead
	f.Fuzz(func(t *testing.T, b []byte) {
		if parseRequest(b, &h, fuzzWant) != parsed {
			return
		}
		checkSameAsNetHTTP(t, b, &h)
	})
}

func checkSameAsNetHTTP(t *testing.T, b []byte, h *reqHead) {
	t.Helper()
	if h.n+h.clen > len(b) {
		return // parsed, but the body is still to come
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
	if used != h.n+h.clen || len(body) != h.clen {
		t.Fatalf("%q: fast path reads %d+%d bytes, net/http %d (body %d)", b, h.n, h.clen, used, len(body))
	}
	path, ok := unescapePath(h.path)
	switch {
	case req.Method != h.method:
		t.Fatalf("%q: method %q, net/http %q", b, h.method, req.Method)
	case req.RequestURI != string(h.target):
		t.Fatalf("%q: target %q, net/http %q", b, h.target, req.RequestURI)
	case !ok || req.URL.Path != path:
		t.Fatalf("%q: path %q (%v), net/http %q", b, path, ok, req.URL.Path)
	case req.Host != string(h.host):
		t.Fatalf("%q: host %q, net/http %q", b, h.host, req.Host)
	case req.Close != h.close:
		t.Fatalf("%q: close %v, net/http %v", b, h.close, req.Close)
	case req.ContentLength != int64(h.clen) && !(req.ContentLength == -1 && h.clen == 0):
		t.Fatalf("%q: length %d, net/http %d", b, h.clen, req.ContentLength)
	}
	for k, name := range fuzzWant {
		var got []string
		for _, s := range h.want[k] {
			got = append(got, string(b[s.start:s.end]))
		}
		if want := req.Header[name]; !slices.Equal(got, want) {
			t.Fatalf("%q: %s %q, net/http %q", b, name, got, want)
		}
	}
	// The forwarded lines are every header net/http saw, but those the
	// proxy drops or writes itself.
	fwd := http.Header{}
	for _, s := range h.lines {
		line := string(b[s.start:s.end])
		name, value, _ := strings.Cut(line, ":")
		fwd.Add(name, strings.Trim(value, " \t\r\n"))
	}
	want := req.Header.Clone()
	for _, k := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		want.Del(k)
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
	var h reqHead
	taken := 0
	for i, s := range requestSeeds {
		res := parseRequest([]byte(s), &h, fuzzWant)
		wantTaken := i < 8
		if (res == parsed) != wantTaken {
			t.Errorf("%q: result %d, want taken %v", s, res, wantTaken)
			continue
		}
		if res == parsed {
			taken++
			checkSameAsNetHTTP(t, []byte(s), &h)
		}
	}
	if taken != 8 {
		t.Errorf("%d seeds taken, want 8", taken)
	}
}

// TestParseRequestIncremental feeds heads a byte at a time: a prefix is
// never taken, and hand-off never waits for bytes that cannot help.
func TestParseRequestIncremental(t *testing.T) {
	var h reqHead
	for _, s := range requestSeeds[:8] {
		full := []byte(s)
		parseRequest(full, &h, fuzzWant)
		n := h.n
		for k := 0; k < n; k++ {
			if res := parseRequest(full[:k], &h, fuzzWant); res != needMore {
				t.Fatalf("%q: the first %d bytes give %d, want needMore", s, k, res)
			}
		}
		if res := parseRequest(full[:n], &h, fuzzWant); res != parsed || h.n != n {
			t.Fatalf("%q: the whole head gives %d (n %d), want parsed with n %d", s, res, h.n, n)
		}
	}
	// A line that can no longer become plain is handed off at once.
	if res := parseRequest([]byte("GET / HTTP/1.0\r\n"), &h, nil); res != handOff {
		t.Errorf("HTTP/1.0 request line: %d, want handOff", res)
	}
	if res := parseRequest([]byte("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"), &h, nil); res != handOff {
		t.Errorf("Transfer-Encoding: %d, want handOff", res)
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
	var h respHead
	f.Fuzz(func(t *testing.T, b []byte) {
		end := bytes.Index(b, []byte("\n\r\n"))
		if e := bytes.Index(b, []byte("\n\n")); e >= 0 && (end < 0 || e < end) {
			end = e - 1
		}
		if end < 0 {
			return
		}
		head := b[:end+bytes.IndexByte(b[end+1:], '\n')+2]
		if parseResponse(head, &h) != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatalf("fast path takes %q; net/http refuses it: %v", head, err)
		}
		if resp.StatusCode != h.code {
			t.Fatalf("%q: status %d, net/http %d", head, h.code, resp.StatusCode)
		}
		chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
		if chunked != h.chunked {
			t.Fatalf("%q: chunked %v, net/http %v", head, h.chunked, chunked)
		}
		if !h.chunked && h.code >= 200 && h.code != 204 && h.code != 304 && resp.ContentLength != h.clen {
			t.Fatalf("%q: length %d, net/http %d", head, h.clen, resp.ContentLength)
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
