package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// llmStream is an OpenAI-compatible completion stream of n content
// events, the usage (tokens, written as given) in the last, then [DONE].
func llmStream(n int, tokens string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"}}],\"usage\":null}\n\n", i)
	}
	fmt.Fprintf(&b, "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d,\"total_tokens\":%s}}\n\n", n, tokens)
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// llmJSON is an OpenAI-compatible completion with the usage given.
func llmJSON(tokens string) string {
	return `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"{\"usage\":{\"total_tokens\":0}}"}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":` + tokens + `}}`
}

// newLLMUpstream answers like an OpenAI-compatible API, by the path's
// last segment. json?tokens=N is a JSON completion. stream?tokens=N&events=K
// is an event stream, split in two writes at byte split when given. hold
// is a stream that reports tokens in its first event, then waits for the
// client to leave (left gets a value then). Every body is chunked, so that a client has read it
// only once the gateway's handler has returned.
func newLLMUpstream(t testing.TB) (url string, left chan struct{}) {
	left = make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		tokens := q.Get("tokens")
		rc := http.NewResponseController(w)
		switch path.Base(r.URL.Path) {
		case "json":
			w.Header().Set("Content-Type", "application/json")
			body := llmJSON(tokens)
			io.WriteString(w, body[:10])
			rc.Flush()
			io.WriteString(w, body[10:])
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			events, _ := strconv.Atoi(q.Get("events"))
			body := llmStream(events, tokens)
			split, err := strconv.Atoi(q.Get("split"))
			if err != nil {
				split = len(body)
			}
			io.WriteString(w, body[:split])
			rc.Flush()
			io.WriteString(w, body[split:])
		case "hold":
			w.Header().Set("Content-Type", "text/event-stream")
			if tokens != "" {
				fmt.Fprintf(w, "data: {\"usage\":{\"total_tokens\":%s}}\n\n", tokens)
			} else {
				io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
			}
			rc.Flush()
			<-r.Context().Done()
			left <- struct{}{}
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, left
}

// tokensRule is a tokens-per-period rule per API key, metered from the
// response's usage.
func tokensRule(period string, max int) string {
	return `rules:
  - name: tokens
    key: [header:Authorization]
    cost: {response_json: usage.total_tokens, max: ` + strconv.Itoa(max) + `, default: 50}
    limit: {algorithm: token_bucket, rate: 1000, period: ` + period + `}
`
}

// complete sends one request with key and reads its whole answer.
func complete(t testing.TB, addr, key, target string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+target, strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept-Encoding", "gzip")
	req.Close = true
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// remaining is key's remaining tokens, from a probe whose response
// reports 0 tokens: it costs nothing once it ends.
func remaining(t testing.TB, addr, key string) int {
	t.Helper()
	resp, _ := complete(t, addr, key, "/json?tokens=0")
	n, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("probe: %d, remaining %q", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	return n + 1 // the probe's own unit, given back
}

// TestResponseJSONTokensPerMinute: a 1000 tokens/min rule admits
// requests while the tokens their responses reported leave some, on
// JSON bodies and streams alike, then refuses; another key is untouched.
func TestResponseJSONTokensPerMinute(t *testing.T) {
	up, _ := newLLMUpstream(t)
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, up, tokensRule("1m", 1000))
			var codes []int
			for _, target := range []string{"/json?tokens=400", "/stream?events=5&tokens=400", "/json?tokens=400", "/stream?events=5&tokens=400"} {
				resp, body := complete(t, addr, "alice", target)
				codes = append(codes, resp.StatusCode)
				if resp.StatusCode == 200 && strings.HasPrefix(target, "/stream") && body != llmStream(5, "400") {
					t.Errorf("the stream arrived changed: %q", body)
				}
			}
			// 1000, 600, 200 left at admission; then 200 in debt.
			if fmt.Sprint(codes) != "[200 200 200 429]" {
				t.Errorf("codes %v, want [200 200 200 429]", codes)
			}
			if resp, _ := complete(t, addr, "bob", "/json?tokens=400"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "999" {
				t.Errorf("another key: %d, remaining %s", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
			}
		})
	}
}

// TestResponseJSONCharges: what each response costs its key, read from
// the key's remaining tokens after it (an hour's refill is a token in
// 3.6s: one of slack).
func TestResponseJSONCharges(t *testing.T) {
	up, _ := newLLMUpstream(t)
	addr := startGateway(t, "standard", up, tokensRule("1h", 900))
	for i, tc := range []struct {
		target string
		cost   int
	}{
		{"/json?tokens=123", 123},
		{"/json?tokens=0", 0},
		{"/json?tokens=5000", 900},  // max
		{"/json?tokens=1e400", 900}, // max
		{"/json?tokens=-5", 50},     // default
		{"/json?tokens=%22300%22", 50},
		{"/json?tokens=NaN", 50},
		{"/json?tokens=2.5", 3},
		{"/json?tokens=7,%22total_tokens%22:800", 800}, // a key given twice: the larger
		{"/stream?events=3&tokens=77", 77},
		{"/stream?events=0&tokens=null", 50},
		{"/nothing", 50},
	} {
		key := "k" + strconv.Itoa(i)
		if resp, _ := complete(t, addr, key, tc.target); resp.StatusCode != 200 && resp.StatusCode != 404 {
			t.Fatalf("%s: %d", tc.target, resp.StatusCode)
		}
		if got := 1000 - remaining(t, addr, key); got < tc.cost-1 || got > tc.cost {
			t.Errorf("%s cost %d, want %d", tc.target, got, tc.cost)
		}
	}
}

// TestResponseJSONSplitAnywhere: a stream split by the upstream at any
// byte is passed on whole and charged the same.
func TestResponseJSONSplitAnywhere(t *testing.T) {
	up, _ := newLLMUpstream(t)
	addr := startGateway(t, "standard", up, tokensRule("1h", 1000))
	want := llmStream(2, "600")
	for i := range len(want) + 1 {
		key := "split" + strconv.Itoa(i)
		resp, body := complete(t, addr, key, "/stream?events=2&tokens=600&split="+strconv.Itoa(i))
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("split at %d: %d %q", i, resp.StatusCode, body)
		}
		if got := 1000 - remaining(t, addr, key); got < 599 || got > 600 {
			t.Fatalf("split at %d: cost %d, want 600", i, got)
		}
	}
}

// TestResponseJSONConcurrentStreams: streams in flight together are each
// admitted, and each charged what it reported, once.
func TestResponseJSONConcurrentStreams(t *testing.T) {
	up, _ := newLLMUpstream(t)
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, up, tokensRule("1h", 1000))
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if resp, body := complete(t, addr, "carol", "/stream?events=20&tokens=100"); resp.StatusCode != 200 || body != llmStream(20, "100") {
						t.Errorf("%d %q", resp.StatusCode, body)
					}
				})
			}
			wg.Wait()
			if got := 1000 - remaining(t, addr, "carol"); got < 799 || got > 800 {
				t.Errorf("8 streams of 100 cost %d, want 800", got)
			}
		})
	}
}

// TestResponseJSONClientLeaves: a client that leaves mid-stream pays what
// the upstream had reported, or the default when more; and the stream's
// first event reached it before the upstream sent more (never buffered).
func TestResponseJSONClientLeaves(t *testing.T) {
	up, left := newLLMUpstream(t)
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, up, tokensRule("1h", 1000))
			for _, tc := range []struct {
				tokens string
				cost   int
			}{{"300", 300}, {"", 50}, {"7", 50}} {
				key := transport + "-leaves-" + tc.tokens
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(nc, "POST /hold?tokens=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n\r\n", tc.tokens, key)
				br := bufio.NewReader(nc)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				if err != nil || !strings.HasPrefix(line, "data: {") {
					t.Fatalf("first event: %q %v", line, err)
				}
				nc.Close()
				<-left
				deadline := time.Now().Add(10 * time.Second)
				for {
					got := 1000 - remaining(t, addr, key)
					if got >= tc.cost-1 && got <= tc.cost {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("tokens %q: cost %d, want %d", tc.tokens, got, tc.cost)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// TestResponseJSONClearBody: a request a response_json rule meters goes
// upstream without Accept-Encoding, so that its answer is readable.
func TestResponseJSONClearBody(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		io.WriteString(w, llmJSON("1"))
	}))
	t.Cleanup(up.Close)
	addr := startGateway(t, "standard", up.URL, tokensRule("1h", 1000))
	complete(t, addr, "dave", "/x")
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "" {
		t.Errorf("the upstream got Accept-Encoding %q", got)
	}
}

// TestResponseJSONDocsExample: docs/gateway.md's tokens-per-minute rules,
// as written, meter a stream through the gateway.
func TestResponseJSONDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "#### A cost read from the response body")
	var blocks []string
	for rest := section; len(blocks) < 2; {
		var block string
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			t.Fatalf("docs/gateway.md: %d yaml blocks in the section, want 2", len(blocks))
		}
		block, rest, _ = strings.Cut(rest, "```")
		blocks = append(blocks, block)
	}
	oneCost, _, _ := strings.Cut(blocks[0], "    cost:\n")
	up, _ := newLLMUpstream(t)
	for i, file := range []string{blocks[0], oneCost + blocks[1]} {
		addr := startGateway(t, "standard", up, file)
		start := time.Now()
		if resp, _ := complete(t, addr, "eve", "/v1/stream?events=2&tokens=700"); resp.StatusCode != 200 {
			t.Fatalf("example %d: %d", i, resp.StatusCode)
		}
		resp, _ := complete(t, addr, "eve", "/v1/x")
		// 100000 - 700 (the second's paths are not there: its default,
		// 500) - this request's unit, plus the refill meanwhile.
		least := []int{99299, 99499}[i]
		most := least + int(time.Since(start).Seconds()*100000/60) + 1
		if n, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); n < least || n > most {
			t.Errorf("example %d: remaining %d, want %d..%d", i, n, least, most)
		}
	}
}

// TestResponseJSONReserveHoldsConcurrentStreams: with reserve, streams in
// flight together hold their reserves, so a key's burst of long requests
// is refused beyond what the bucket holds, not admitted on one unit each.
func TestResponseJSONReserveHoldsConcurrentStreams(t *testing.T) {
	for name, store := range map[string]func(*testing.T) string{
		"memory": func(*testing.T) string { return "" },
		"redis":  func(t *testing.T) string { return "store: {url: \"" + redistest.Server(t) + "\"}\n" },
	} {
		t.Run(name, func(t *testing.T) {
			store := store(t)
			entered, release := make(chan struct{}, 8), make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n")
				http.NewResponseController(w).Flush()
				entered <- struct{}{}
				<-release
				io.WriteString(w, llmStream(1, "200"))
			}))
			t.Cleanup(up.Close)
			addr := startGateway(t, "standard", up.URL, store+`rules:
  - name: tokens
    key: [header:Authorization]
    cost: {response_json: usage.total_tokens, max: 1000, default: 50, reserve: 300}
    limit: {algorithm: token_bucket, rate: 1000, period: 1h}
`)
			codes := make(chan int, 6)
			for range 6 {
				go func() {
					resp, _ := complete(t, addr, "frank", "/v1/chat/completions")
					codes <- resp.StatusCode
				}()
			}
			// Each request is either held by the upstream or answered 429.
			var got []int
			for held := 0; held+len(got) < 6; {
				select {
				case <-entered:
					held++
				case c := <-codes:
					got = append(got, c)
				}
			}
			close(release)
			for len(got) < 6 {
				got = append(got, <-codes)
			}
			ok := 0
			for _, c := range got {
				if c == 200 {
					ok++
				}
			}
			// 1000 holds three reserves of 300.
			if ok != 3 {
				t.Errorf("%d of 6 admitted (%v), want 3", ok, got)
			}
			// Each settled to 200: 400 left (remaining counts the probe's one unit;
			// it reserved 300).
			if got := 1000 - (remaining(t, addr, "frank") - 1 + 300); got < 599 || got > 600 {
				t.Errorf("3 streams of 200 cost %d, want 600", got)
			}
		})
	}
}
