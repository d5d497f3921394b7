package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
	"github.com/ratekeeper/ratekeeper/internal/tlstest"
)

// recorder is a fallback transport that counts what it was given.
type recorder struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n.Add(1)
	return r.rt.RoundTrip(req)
}

func newDirect(t *testing.T, rawURL string) (*Transport, *recorder) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConnsPerHost = 16
	dt := New(u, tr)
	if dt == nil {
		t.Fatalf("no direct transport for %s", rawURL)
	}
	rec := &recorder{rt: tr}
	dt.fallback = rec
	t.Cleanup(dt.CloseIdleConnections)
	return dt, rec
}

// get sends method to path and reads the whole body.
func roundTrip(t *testing.T, rt http.RoundTripper, method, rawURL string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, rawURL, err)
	}
	resp.Body.Close()
	return resp, string(b)
}

func TestDirectReusesOneConnection(t *testing.T) {
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/chunked":
			io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			io.WriteString(w, "b")
		default:
			w.Header().Set("Content-Length", "3")
			io.WriteString(w, "ok\n")
		}
	}))
	dt, rec := newDirect(t, up.URL)
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
		length       int64
	}{
		{"GET", "/", 200, "ok\n", 3},
		{"HEAD", "/", 200, "", 3},
		{"GET", "/204", 204, "", 0},
		{"GET", "/304", 304, "", -1},
		{"GET", "/chunked", 200, "ab", -1},
		{"OPTIONS", "/", 200, "ok\n", 3},
		{"GET", "/", 200, "ok\n", 3},
	} {
		resp, body := roundTrip(t, dt, tc.method, up.URL+tc.path, nil)
		if resp.StatusCode != tc.status || body != tc.body || tc.length >= 0 && resp.ContentLength != tc.length {
			t.Errorf("%s %s: %d %q length %d, want %d %q length %d", tc.method, tc.path, resp.StatusCode, body, resp.ContentLength, tc.status, tc.body, tc.length)
		}
	}
	if n := up.Conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
	if n := rec.n.Load(); n != 0 {
		t.Errorf("fallback used %d times", n)
	}
}

func TestDirectDiscardsConnection(t *testing.T) {
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, strings.Repeat("x", 100<<10))
	}))
	dt, _ := newDirect(t, up.URL)
	// A body closed before its end: what is left could be anything.
	req, _ := http.NewRequest("GET", up.URL+"/", nil)
	resp, err := dt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := resp.Body.Read(buf); err == nil {
		t.Error("read after Close succeeded")
	}
	roundTrip(t, dt, "GET", up.URL+"/", nil)
	if n := up.Conns.Load(); n != 2 {
		t.Errorf("after an unread body: %d connections, want 2", n)
	}
	// Connection: close from the upstream.
	roundTrip(t, dt, "GET", up.URL+"/close", nil)
	if n := len(dt.idle); n != 0 {
		t.Errorf("after Connection: close: %d idle connections, want 0", n)
	}
	roundTrip(t, dt, "GET", up.URL+"/", nil)
	if n := up.Conns.Load(); n != 3 {
		t.Errorf("after Connection: close: %d connections, want 3", n)
	}
	// Read to the end, the body's connection is reused even before Close.
	roundTrip(t, dt, "GET", up.URL+"/", nil)
	if n := up.Conns.Load(); n != 3 {
		t.Errorf("after a whole body: %d connections, want 3", n)
	}
}

func TestDirectStreamsResponse(t *testing.T) {
	next := make(chan struct{})
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "second")
		w.Header().Set("X-Sum", "11")
	}))
	dt, _ := newDirect(t, up.URL)
	req, _ := http.NewRequest("GET", up.URL, nil)
	resp, err := dt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("first chunk %q %v", buf, err)
	}
	close(next) // the upstream writes the rest only now: the body streams
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "second" {
		t.Fatalf("rest %q %v", rest, err)
	}
	resp.Body.Close()
	if got := resp.Trailer.Get("X-Sum"); got != "11" {
		t.Errorf("trailer %q", got)
	}
	roundTrip(t, dt, "GET", up.URL, nil) // blocks no more: next is closed
	if n := up.Conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestDirectInformational(t *testing.T) {
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "done")
	}))
	dt, _ := newDirect(t, up.URL)
	var got []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, fmt.Sprint(code, " ", h.Get("Link")))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", up.URL, nil)
	resp, err := dt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "done" {
		t.Errorf("final response %d %q", resp.StatusCode, b)
	}
	if want := "103 </style.css>; rel=preload"; len(got) != 2 || got[0] != want || got[1] != want {
		t.Errorf("1xx seen %q", got)
	}
	// Through the reverse proxy, the client sees the early hints too.
	u, _ := url.Parse(up.URL)
	gw := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: dt})
	defer gw.Close()
	got = nil
	req, _ = http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", gw.URL, nil)
	resp, err = http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) == 0 || got[0] != "103 </style.css>; rel=preload" {
		t.Errorf("through the proxy, 1xx seen %q", got)
	}
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int64
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

func TestDirectRequestBodies(t *testing.T) {
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %d %v %s", r.Method, r.ContentLength, r.TransferEncoding, b)
	}))
	dt, _ := newDirect(t, up.URL)
	for _, tc := range []struct {
		name   string
		length int64
		want   string
	}{
		{"known length", 5, "POST 5 [] hello"},
		{"chunked", -1, "POST -1 [chunked] hello"},
	} {
		body := &closeCounter{Reader: strings.NewReader("hello")}
		req, _ := http.NewRequest("POST", up.URL, body)
		req.ContentLength = tc.length
		resp, err := dt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != tc.want {
			t.Errorf("%s: upstream saw %q, want %q", tc.name, b, tc.want)
		}
		if n := body.closed.Load(); n != 1 {
			t.Errorf("%s: request body closed %d times", tc.name, n)
		}
	}
	// A large body streams: the upstream reads it as it comes.
	pr, pw := io.Pipe()
	go func() {
		for range 64 {
			pw.Write(bytes.Repeat([]byte("y"), 16<<10))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", up.URL, pr)
	resp, err := dt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("PUT -1 [chunked] %s", bytes.Repeat([]byte("y"), 1<<20)); string(b) != want {
		t.Errorf("streamed body: upstream saw %d bytes, want %d", len(b), len(want))
	}
}

func TestDirectUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dt, _ := newDirect(t, "http://"+addr)
	body := &closeCounter{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest("POST", "http://"+addr, body)
	if _, err := dt.RoundTrip(req); err == nil {
		t.Fatal("no error from a closed port")
	}
	if body.closed.Load() != 1 {
		t.Error("request body not closed after a failed dial")
	}
}

func TestDirectRetriesOnlyWhatIsSafe(t *testing.T) {
	// The upstream answers the first request on each connection and then
	// closes it, as a server does whose idle timeout passed; the pool still
	// holds it.
	var requests atomic.Int64
	closed := make(chan struct{}, 16)
	halfClosed := make(chan struct{}, 16)
	u := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		requests.Add(1)
		io.WriteString(c, h1test.OKResponse)
		c.(*net.TCPConn).CloseWrite()
		halfClosed <- struct{}{}
		io.Copy(io.Discard, c) // until the client closes
		closed <- struct{}{}
	})
	dt, _ := newDirect(t, u)
	for _, method := range []string{"GET", "POST"} {
		requests.Store(0)
		roundTrip(t, dt, method, u, strings.NewReader("")) // pools a connection the upstream has closed
		// Wait for the close: a POST is sent on a pooled connection only
		// if it looks alive, and before the FIN it does.
		<-halfClosed
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader("payload")
		}
		resp, b := roundTrip(t, dt, method, u, body)
		if resp.StatusCode != 200 || b != "ok" {
			t.Errorf("%s on a connection closed while idle: %d %q", method, resp.StatusCode, b)
		}
		if n := requests.Load(); n != 2 {
			t.Errorf("%s: upstream saw %d requests, want 2", method, n)
		}
		// The second request's connection closes too; wait for it, so
		// that the next round's wait is for its own connection.
		<-halfClosed
		dt.CloseIdleConnections()
	}

	// An upstream that reads the request and closes without an answer: a
	// request on a new connection is never retried, nor a POST on a pooled
	// one.
	var seen atomic.Int64
	var fail atomic.Bool
	u2 := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			seen.Add(1)
			if fail.Load() {
				return
			}
			io.WriteString(c, h1test.OKResponse)
		}
	})
	dt2, _ := newDirect(t, u2)
	fail.Store(true)
	req, _ := http.NewRequest("GET", u2, nil)
	if _, err := dt2.RoundTrip(req); err == nil {
		t.Error("GET on a new connection that the upstream dropped: no error")
	}
	if n := seen.Load(); n != 1 {
		t.Errorf("GET on a new connection: upstream saw %d requests, want 1", n)
	}
	fail.Store(false)
	roundTrip(t, dt2, "GET", u2, nil) // pools a live connection
	fail.Store(true)
	seen.Store(0)
	req, _ = http.NewRequest("POST", u2, strings.NewReader("once"))
	if _, err := dt2.RoundTrip(req); err == nil {
		t.Error("POST dropped by the upstream: no error")
	}
	if n := seen.Load(); n != 1 {
		t.Errorf("POST: upstream saw %d requests, want exactly 1", n)
	}
	// A GET on a pooled connection that the upstream drops is sent once
	// more, on a new connection, and no more.
	fail.Store(false)
	roundTrip(t, dt2, "GET", u2, nil)
	fail.Store(true)
	seen.Store(0)
	req, _ = http.NewRequest("GET", u2, nil)
	if _, err := dt2.RoundTrip(req); err == nil {
		t.Error("GET dropped twice: no error")
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("GET dropped on a pooled connection: upstream saw %d requests, want 2", n)
	}
}

func TestDirectCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	arrived := make(chan struct{}, 2)
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			io.WriteString(w, "part")
			w.(http.Flusher).Flush()
		}
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	dt, _ := newDirect(t, up.URL)

	// Before the response headers.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", up.URL, nil)
	errc := make(chan error, 1)
	go func() {
		_, err := dt.RoundTrip(req)
		errc <- err
	}()
	<-arrived
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before the headers: %v", err)
	}

	// In the middle of the body.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", up.URL+"/body", nil)
	resp, err := dt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	<-arrived
	buf := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := resp.Body.Read(buf)
		errc <- err
	}()
	cancel()
	if err := <-errc; err == nil {
		t.Error("read after cancel: no error")
	}
	resp.Body.Close()
	if len(dt.idle) != 0 {
		t.Errorf("%d idle connections after cancelled requests, want 0", len(dt.idle))
	}
}

func TestDirectBoundsHeaders(t *testing.T) {
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("b", 8<<10))
	}))
	dt, _ := newDirect(t, up.URL)
	dt.maxHeader = 4 << 10
	req, _ := http.NewRequest("GET", up.URL, nil)
	if _, err := dt.RoundTrip(req); !errors.Is(err, errHeaderTooLarge) {
		t.Errorf("8 KiB header under a 4 KiB bound: %v", err)
	}
	dt.maxHeader = 16 << 10
	if resp, _ := roundTrip(t, dt, "GET", up.URL, nil); len(resp.Header.Get("X-Big")) != 8<<10 {
		t.Error("8 KiB header under a 16 KiB bound: lost")
	}
}

func TestDirectUnsolicitedBytes(t *testing.T) {
	var conns atomic.Int64
	u := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, h1test.OKResponse+"HTTP/1.1 200 OK\r\n") // and more than asked
		}
	})
	dt, _ := newDirect(t, u)
	for range 2 {
		if resp, b := roundTrip(t, dt, "GET", u, nil); resp.StatusCode != 200 || b != "ok" {
			t.Errorf("%d %q", resp.StatusCode, b)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: one that sent more than its response is not reused", n)
	}
}

func TestDirectFallsBack(t *testing.T) {
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	dt, rec := newDirect(t, up.URL)
	for i, set := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Connection", "Upgrade"); r.Header.Set("Upgrade", "websocket") },
		func(r *http.Request) { r.Header.Set("Expect", "100-continue") },
		func(r *http.Request) { r.URL.Host = strings.Replace(r.URL.Host, "127.0.0.1", "localhost", 1) },
	} {
		req, _ := http.NewRequest("GET", up.URL, nil)
		set(req)
		resp, err := dt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n := rec.n.Load(); n != int64(i+1) {
			t.Errorf("case %d: fallback used %d times, want %d", i, n, i+1)
		}
	}
	u, _ := url.Parse("ftp://example.com")
	if New(u, &http.Transport{}) != nil {
		t.Error("a direct transport for ftp")
	}
	u, _ = url.Parse("https://example.com")
	if dt := New(u, &http.Transport{}); dt == nil || dt.addr != "example.com:443" || dt.tls.ServerName != "example.com" {
		t.Error("no direct transport for https, or not to port 443 under its host's name")
	}
	u, _ = url.Parse("http://example.com")
	proxied := &http.Transport{Proxy: func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy:3128") }}
	if New(u, proxied) != nil {
		t.Error("a direct transport where a forward proxy is configured")
	}
}

// TestDirectEarlyAnswer sends a large body to an upstream that answers 413
// after the request's head and then neither reads nor closes: the answer
// must come back, not a write blocked on full socket buffers.
func TestDirectEarlyAnswer(t *testing.T) {
	done := make(chan struct{})
	url := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 8\r\n\r\ntoo big\n")
		<-done
	})
	t.Cleanup(func() { close(done) })
	dt, rec := newDirect(t, url)
	for _, size := range []int{maxBody, 16 << 20} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "PUT", url, bytes.NewReader(make([]byte, size)))
		resp, err := dt.RoundTrip(req)
		if err != nil {
			cancel()
			t.Fatalf("%d-byte body: %v", size, err)
		}
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%d-byte body: status %d, want 413", size, resp.StatusCode)
		}
	}
	if n := rec.n.Load(); n != 1 {
		t.Errorf("fallback used %d times, want 1 (for the large body only)", n)
	}
}

func TestDirectConcurrent(t *testing.T) {
	up := h1test.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	dt, _ := newDirect(t, up.URL)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				method, body := "GET", ""
				if i%3 == 0 {
					method, body = "POST", fmt.Sprint(g, "-", i)
				}
				req, _ := http.NewRequest(method, fmt.Sprintf("%s/%d/%d", up.URL, g, i), strings.NewReader(body))
				resp, err := dt.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf("%s /%d/%d %s", method, g, i, body); err != nil || string(b) != want {
					t.Errorf("got %q %v, want %q", b, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := up.Conns.Load(); n > 8 {
		t.Errorf("%d connections for 8 goroutines", n)
	}
}

// outcome is what a client sees of a response: enough to compare two
// transports.
type outcome struct {
	err     bool
	status  int
	length  int64
	body    string
	bodyErr bool
	trailer string
}

// exchange sends one request through rt, which dials a pipe whose other
// end reads the request and answers raw, then closes.
func exchange(rt http.RoundTripper, method, scheme string) outcome {
	req, _ := http.NewRequest(method, scheme+"://upstream.test/x", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return outcome{err: true}
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return outcome{status: resp.StatusCode, length: resp.ContentLength, body: string(b), bodyErr: err != nil, trailer: fmt.Sprint(resp.Trailer)}
}

func pipeDialer(raw []byte) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			if _, err := http.ReadRequest(bufio.NewReader(server)); err != nil {
				return
			}
			server.Write(raw)
		}()
		return client, nil
	}
}

// tlsPipeDialer is pipeDialer with the upstream's end speaking TLS as
// server: the dialer returns the clear end, which each transport wraps in
// its own TLS client. The two ends are a loopback TCP connection, not a
// net.Pipe: TLS 1.3's server writes its session tickets while the client
// writes its request, which needs the buffers a socket has.
func tlsPipeDialer(raw []byte, server *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, err
		}
		end, err := ln.Accept()
		if err != nil {
			client.Close()
			return nil, err
		}
		go func() {
			s := tls.Server(end, server)
			defer s.Close()
			if _, err := http.ReadRequest(bufio.NewReader(s)); err != nil {
				return
			}
			s.Write(raw)
		}()
		return client, nil
	}
}

// pki is a CA and an upstream certificate for upstream.test.
type pki struct {
	server, client *tls.Config
}

func newPKI(t testing.TB) pki {
	ca := tlstest.NewCA(t, "upstream CA")
	return pki{
		server: &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "upstream.test", "127.0.0.1").TLS(t)}},
		client: &tls.Config{RootCAs: ca.Pool()},
	}
}

// checkSameAsStandard demands that the direct transport report raw as
// http.Transport does, over clear text and, with a pki, over TLS.
func checkSameAsStandard(t *testing.T, raw []byte, method string, over *pki) {
	wd := time.AfterFunc(5*time.Second, func() { panic(fmt.Sprintf("HANG %s %q", method, raw)) })
	defer wd.Stop()
	scheme, dial := "http", pipeDialer(raw)
	base := &http.Transport{MaxResponseHeaderBytes: 4 << 10}
	if over != nil {
		scheme, dial = "https", tlsPipeDialer(raw, over.server)
		base.TLSClientConfig = over.client
	}
	std := base.Clone()
	std.DialContext, std.DisableCompression = dial, true
	defer std.CloseIdleConnections()
	want := exchange(std, method, scheme)
	if want.status == http.StatusSwitchingProtocols {
		return // unasked for: the direct transport refuses it (and the proxy would answer 502 either way)
	}
	u, _ := url.Parse(scheme + "://upstream.test")
	dt := New(u, base)
	dt.dial = dial
	defer dt.CloseIdleConnections()
	if got := exchange(dt, method, scheme); got != want {
		t.Errorf("%s %s, response %q:\ndirect   %+v\nstandard %+v", scheme, method, raw, got, want)
	}
}

func TestDirectSameAsStandard(t *testing.T) {
	p := newPKI(t)
	for _, raw := range h1test.Responses {
		for _, method := range []string{"GET", "HEAD"} {
			checkSameAsStandard(t, []byte(raw), method, nil)
			checkSameAsStandard(t, []byte(raw), method, &p)
		}
	}
}

func FuzzDirectSameAsStandard(f *testing.F) {
	p := newPKI(f)
	for _, raw := range h1test.Responses {
		f.Add([]byte(raw), false, false)
	}
	f.Add([]byte(h1test.Responses[0]), false, true)
	f.Fuzz(func(t *testing.T, raw []byte, head, overTLS bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		over := &p
		if !overTLS {
			over = nil
		}
		checkSameAsStandard(t, raw, method, over)
	})
}

// An https:// upstream: the direct transport speaks TLS, verifies the
// upstream, keeps one connection for requests in turn (TLS 1.3's session
// tickets, which arrive after the handshake, do not make it look
// unclean), and never reuses a connection on which the upstream sent more
// than its response, whether the extra bytes came with the response (and
// crypto/tls may have read them already) or later.
func TestDirectTLS(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		name  string
		extra string        // written after each response: in its record (at once) or its own
		after time.Duration // before the extra bytes
		conns int64         // for three requests
	}{
		{"clean", "", 0, 1},
		{"extra bytes at once", "HTTP/1.1 200 OK\r\n", 0, 3},
		{"extra bytes later", "HTTP/1.1 200 OK\r\n", 20 * time.Millisecond, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int64
			ln, err := tls.Listen("tcp", "127.0.0.1:0", p.server)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					conns.Add(1)
					go func() {
						defer c.Close()
						br := bufio.NewReader(c)
						for {
							if _, err := http.ReadRequest(br); err != nil {
								return
							}
							if tc.extra != "" && tc.after == 0 {
								// One write, one record: crypto/tls reads the
								// extra bytes with the response. (Two writes
								// raced the next request on a busy machine: the
								// second record could come after the check
								// before reuse, as unasked bytes may with any
								// HTTP/1.1 client.)
								io.WriteString(c, h1test.OKResponse+tc.extra)
								continue
							}
							io.WriteString(c, h1test.OKResponse)
							if tc.extra != "" {
								time.Sleep(tc.after) // the extra bytes' timing is the case
								io.WriteString(c, tc.extra)
							}
						}
					}()
				}
			}()
			u := "https://" + ln.Addr().String()
			tr := &http.Transport{TLSClientConfig: p.client.Clone(), MaxIdleConnsPerHost: 4}
			tr.TLSClientConfig.ServerName = "upstream.test"
			pu, _ := url.Parse(u)
			dt := New(pu, tr)
			defer dt.CloseIdleConnections()
			for i := range 3 {
				if resp, b := roundTrip(t, dt, "GET", u+"/x", nil); resp.StatusCode != 200 || b != "ok" {
					t.Errorf("request %d: %d %q", i, resp.StatusCode, b)
				}
				if tc.after > 0 {
					// Let the late bytes arrive while the connection is idle.
					deadline := time.Now().Add(2 * time.Second)
					for !peeked(dt) && time.Now().Before(deadline) {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}
			if n := conns.Load(); n != tc.conns {
				t.Errorf("%d connections for 3 requests, want %d", n, tc.conns)
			}
		})
	}
	// A certificate the transport cannot verify fails the request.
	ln, _ := tls.Listen("tcp", "127.0.0.1:0", p.server)
	defer ln.Close()
	go func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	pu, _ := url.Parse("https://" + ln.Addr().String())
	dt := New(pu, &http.Transport{})
	req, _ := http.NewRequest("GET", pu.String(), nil)
	if _, err := dt.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an unverifiable upstream: %v", err)
	}
}

// peeked reports whether the idle connection has something to read: the
// late bytes have arrived.
func peeked(dt *Transport) bool {
	dt.mu.Lock()
	defer dt.mu.Unlock()
	if len(dt.idle) == 0 {
		return true
	}
	c := dt.idle[len(dt.idle)-1]
	tc := c.nc.(*tls.Conn)
	sc, ok := tc.NetConn().(syscall.Conn)
	if !ok {
		return true
	}
	rc, _ := sc.SyscallConn()
	var n int
	rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	return n > 0
}

// Found in review: a connection cancelled (its client left: the HTTP/2
// relay's RST_STREAM or connection end) just as its response ended, and
// then released as reusable, is not pooled. Over clear text the check at
// reuse finds its past deadline. Over TLS the check clears the read
// deadline, and the next request, another client's, fails its write and
// then waits for an answer with no deadline: a POST hangs.
func TestDirectCancelledNotPooled(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			up := httptest.NewUnstartedServer(h)
			tr := &http.Transport{MaxIdleConnsPerHost: 16}
			if scheme == "https" {
				up.StartTLS()
				tr.TLSClientConfig = up.Client().Transport.(*http.Transport).TLSClientConfig
			} else {
				up.Start()
			}
			defer up.Close()
			u, _ := url.Parse(up.URL)
			dt := New(u, tr)
			defer dt.CloseIdleConnections()
			roundTrip(t, dt, "GET", up.URL+"/", nil) // leaves a pooled connection
			c, err := dt.Get(context.Background(), true)
			if err != nil {
				t.Fatal(err)
			}
			c.Cancel()
			c.Release(true)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // over TLS it hung
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", up.URL+"/", strings.NewReader("x"))
			resp, err := dt.RoundTrip(req)
			if err != nil {
				t.Fatalf("a POST after a cancelled connection was released: %v", err)
			}
			resp.Body.Close()
		})
	}
}
