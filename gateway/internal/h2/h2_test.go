package h2

import (
	"errors"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/rules"
)

// The server's wire behaviour is tested through the gateway
// (gateway/h2frames_test.go), against net/http's server; these are its
// parts on their own.

func TestSplitTarget(t *testing.T) {
	for _, c := range []struct {
		target, path, query string
		ok                  bool
	}{
		{"/", "/", "", true},
		{"/a/b?x=1&y=%20", "/a/b", "?x=1&y=%20", true},
		{"/a?", "/a", "?", true},
		{"/a?b?c", "/a", "?b?c", true},
		{"/a%2Fb", "/a%2Fb", "", true},
		{"", "", "", false},
		{"*", "", "", false},
		{"http://h/a", "", "", false},
		{"/a b", "", "", false},
		{"/a#f", "", "", false},
		{"/a?x;y", "", "", false}, // ReverseProxy rewrites the query
		{"/a?x=%zz", "", "", false},
		{"/a?x=%2", "", "", false},
		{"/caf\xc3\xa9", "", "", false},
		{"/a\x7f", "", "", false},
	} {
		path, query, ok := splitTarget(c.target)
		if path != c.path || query != c.query || ok != c.ok {
			t.Errorf("splitTarget(%q) = %q, %q, %v; want %q, %q, %v", c.target, path, query, ok, c.path, c.query, c.ok)
		}
	}
}

// FuzzSplitTarget holds splitTarget to what it promises: a target it takes
// is one net/http reads as it is, whose query ReverseProxy passes on as it
// came.
func FuzzSplitTarget(f *testing.F) {
	for _, s := range []string{"/", "/a?b=c", "/a?b;c", "/%zz", "/a?%2", "*", "/a#b", "/a?b#c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		path, query, ok := splitTarget(target)
		if !ok {
			return
		}
		if path+query != target || path == "" || path[0] != '/' || query != "" && query[0] != '?' {
			t.Fatalf("splitTarget(%q) = %q, %q", target, path, query)
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			if strings.Contains(err.Error(), "invalid URL escape") {
				return // in the path: NormalizeTarget refuses it, and the Handler answers
			}
			t.Fatalf("splitTarget took %q, which net/http refuses: %v", target, err)
		}
		if query != "" && u.RawQuery != query[1:] {
			t.Fatalf("%q: query %q, net/http reads %q", target, query[1:], u.RawQuery)
		}
	})
}

func TestAppendTrailerNames(t *testing.T) {
	got := appendTrailerNames(nil, []byte(" x-a, X-B ,,x-a"))
	got = appendTrailerNames(got, []byte("x-c"))
	if strings.Join(got, ",") != "X-A,X-B,X-C" {
		t.Errorf("trailer names: %q", got)
	}
}

func TestHasToken(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   bool
	}{
		{[]string{"100-continue"}, true},
		{[]string{"x, 100-Continue "}, true},
		{[]string{"100-continues"}, false},
		{nil, false},
	} {
		if got := hasToken(c.values, "100-continue"); got != c.want {
			t.Errorf("hasToken(%q) = %v", c.values, got)
		}
	}
}

// A request body's reads wait for the reader's DATA, end at its error once
// what came is read, and fail at their deadline.
func TestPipe(t *testing.T) {
	p := newPipe()
	p.write([]byte("abc"))
	p.closeWithError(io.EOF)
	if p.write([]byte("late")) {
		t.Error("a closed body took more data")
	}
	b := make([]byte, 2)
	var got []byte
	for {
		n, err := p.read(b)
		got = append(got, b[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "abc" {
		t.Errorf("read %q", got)
	}

	p = newPipe()
	p.setDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := p.read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a read past its deadline: %v", err)
	}
	p.setDeadline(time.Time{})
	p.write([]byte("x"))
	if n, err := p.read(b); n != 1 || err != nil {
		t.Errorf("a read after the deadline was lifted: %d, %v", n, err)
	}
	if n := p.breakWithError(errClosedBody); n != 0 {
		t.Errorf("break dropped %d bytes, want 0", n)
	}
	if _, err := p.read(b); err != errClosedBody {
		t.Errorf("a read after break: %v", err)
	}
}

// isClientIPHeader knows every header rules.ClientAddressHeaders lists.
func TestClientIPHeadersAreTheRules(t *testing.T) {
	for _, h := range rules.ClientAddressHeaders() {
		if !isClientIPHeader(strings.ToLower(h)) {
			t.Errorf("%s: not a client IP header", h)
		}
	}
	if isClientIPHeader("x-forwarded-for") {
		t.Error("x-forwarded-for: a client IP header")
	}
}
