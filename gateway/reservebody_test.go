package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// chatBody is an OpenAI-style chat request asking for maxTokens (written
// as given), padded with a prompt of pad bytes.
func chatBody(maxTokens string, pad int) []byte {
	return []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("w", pad) + `"}],"max_tokens":` + maxTokens + `}`)
}

// postChat posts body with key and reads the whole answer.
func postChat(t testing.TB, addr, key, target string, body []byte, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+target, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.Close = true
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestReserveFromRequestBodyGateway: with tokens per day reserved from
// each request's max_tokens, a key's long streams are admitted while their
// reserves fit, a short one still passes beside them, and each settles to
// the tokens its response reported. Every body reaches the upstream byte
// for byte.
func TestReserveFromRequestBodyGateway(t *testing.T) {
	for name, store := range map[string]func(*testing.T) string{
		"memory": func(*testing.T) string { return "" },
		"redis":  func(t *testing.T) string { return "store: {url: \"" + redistest.Server(t) + "\"}\n" },
	} {
		for _, transport := range []string{"fast", "standard"} {
			t.Run(name+"/"+transport, func(t *testing.T) { reserveFromBody(t, transport, store(t)) })
		}
	}
}

// reserveFromBody is TestReserveFromRequestBodyGateway on one transport
// and store.
func reserveFromBody(t *testing.T, transport, store string) {
	entered, release := make(chan struct{}, 8), make(chan struct{})
	bodies := make(chan []byte, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream reading the body: %v", err)
		}
		bodies <- b
		w.Header().Set("Content-Type", "text/event-stream")
		if r.URL.Path == "/hold" {
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n")
			http.NewResponseController(w).Flush()
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, llmStream(1, r.URL.Query().Get("tokens")))
	}))
	t.Cleanup(up.Close)
	addr := startGateway(t, transport, up.URL, store+`rules:
  - name: tpd
    key: [header:Authorization]
    cost:
      response_json: usage.total_tokens
      max: 1000
      default: 50
      reserve: {request_json: max_tokens, default: 500}
    limit: {algorithm: token_bucket, rate: 1000, period: 24h}
`)
	sent := func(want []byte) {
		t.Helper()
		if got := <-bodies; !bytes.Equal(got, want) {
			t.Errorf("the upstream read %d bytes, not the %d sent", len(got), len(want))
		}
	}
	codes := make(chan int, 4)
	hold := func(maxTokens string) {
		b := chatBody(maxTokens, 3000)
		go func() { codes <- postChat(t, addr, "ann", "/hold?tokens=100", b).StatusCode }()
		<-entered
		sent(b)
	}
	hold("400")
	hold("400")
	if resp := postChat(t, addr, "ann", "/hold?tokens=100", chatBody("400", 0)); resp.StatusCode != 429 {
		t.Errorf("a third reserve of 400 beside 800 held: %d, want 429", resp.StatusCode)
	}
	hold("150")
	close(release)
	for range 3 {
		if c := <-codes; c != 200 {
			t.Errorf("a held stream: %d", c)
		}
	}
	// Three settled at 100: 700 left, less the probe's reserve of 1.
	b := chatBody("1", 0)
	resp := postChat(t, addr, "ann", "/?tokens=0", b)
	sent(b)
	if n, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); n < 699 || n > 701 {
		t.Errorf("after three streams of 100: remaining %d, want 699", n)
	}
	// Bodies that do not give max_tokens reserve the default, and
	// reach the upstream unchanged.
	var gz bytes.Buffer
	z := gzip.NewWriter(&gz)
	z.Write(chatBody("1", 0))
	z.Close()
	for i, tc := range []struct {
		body []byte
		hdr  []string
	}{
		{body: chatBody("1", 2<<20)},
		{body: gz.Bytes(), hdr: []string{"Content-Encoding", "gzip"}},
		{body: []byte("max_tokens=1")},
		{body: chatBody(`"1"`, 0)},
	} {
		key := "bob" + strconv.Itoa(i)
		resp := postChat(t, addr, key, "/?tokens=0", tc.body, tc.hdr...)
		sent(tc.body)
		if r := resp.Header.Get("X-RateLimit-Remaining"); r != "500" {
			t.Errorf("%d: remaining %s at admission, want 1000 less the default reserve of 500", i, r)
		}
	}
}

// TestReserveFromStalledBody: a client that stops sending the body read
// for its reserve is cut by body_timeout (408) before anything is taken
// or sent upstream; the fast path closes the connection instead.
func TestReserveFromStalledBody(t *testing.T) {
	upstream := make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { upstream <- struct{}{} }))
	t.Cleanup(up.Close)
	for _, transport := range []string{"standard", "fast"} {
		addr := startGateway(t, transport, up.URL, `client: {body_timeout: 300ms}
rules:
  - name: tpd
    key: [header:Authorization]
    cost: {response_json: usage.total_tokens, max: 1000, default: 50, reserve: {request_json: max_tokens, default: 500}}
    limit: {algorithm: token_bucket, rate: 1000, period: 24h}
`)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: k\r\nContent-Length: 100\r\n\r\n{\"max_tok")
		c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a bound for the test only
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err != nil && transport == "fast" && errors.Is(err, io.ErrUnexpectedEOF):
			// The fast path's hand-off closes a stalled connection.
		case err != nil:
			t.Fatalf("%s: no answer to a stalled body: %v", transport, err)
		case resp.StatusCode != http.StatusRequestTimeout:
			t.Errorf("%s: a stalled body: %d, want 408", transport, resp.StatusCode)
		}
		if n := len(upstream); n != 0 {
			t.Errorf("%s: the upstream got %d requests", transport, n)
		}
	}
}

// TestReserveDocsExamples: the reserve section's examples of
// docs/gateway.md run: the fixed reserve takes 4000 at admission, the
// one read from the body its max_tokens, and a body without it 4000.
func TestReserveDocsExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, first, _ := strings.Cut(string(doc), "#### A cost read from the response body")
	_, first, _ = strings.Cut(first, "```yaml\n")
	rulePart, _, _ := strings.Cut(first, "    cost:\n")
	_, section, _ := strings.Cut(string(doc), "#### Reserve, then settle")
	section, _, _ = strings.Cut(section, "\n### ")
	var blocks []string
	for rest := section; ; {
		var block string
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		block, rest, _ = strings.Cut(rest, "```")
		blocks = append(blocks, block)
	}
	if len(blocks) != 2 {
		t.Fatalf("docs/gateway.md: %d yaml blocks in the reserve section, want 2", len(blocks))
	}
	up, _ := newLLMUpstream(t)
	for i, tc := range []struct {
		body    string
		reserve int
	}{{`{"max_tokens":7000}`, 4000}, {`{"max_tokens":7000}`, 7000}, {`{"model":"m"}`, 4000}} {
		addr := startGateway(t, "standard", up, rulePart+blocks[min(i, 1)])
		resp := postChat(t, addr, "eve", "/v1/json?tokens=0", []byte(tc.body))
		// 100000 less the reserve, plus at most the refill meanwhile.
		if n, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); n < 100000-tc.reserve || n > 100000-tc.reserve+1000 {
			t.Errorf("example %d, body %s: remaining %d, want %d", i, tc.body, n, 100000-tc.reserve)
		}
	}
}
