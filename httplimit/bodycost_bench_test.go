package httplimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/memstore"
)

// BenchmarkResponseCost is what reading a response's cost costs a
// request whose handler writes an OpenAI-compatible answer: "json-*" a
// 600-byte JSON completion per request, "stream-*" a 1 MiB event stream
// of 2 KiB events (see MB/s). "*-plain" is the same rule with a fixed
// cost, "*-header" with response_header, "*-json" with response_json.
func BenchmarkResponseCost(b *testing.B) {
	json := `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("lorem ipsum ", 35) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":90,"total_tokens":102}}`
	event := "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("x", 1940) + "\"}}],\"usage\":null}\n\n"
	events := (1 << 20) / len(event)
	last := "data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":90,\"total_tokens\":102}}\n\ndata: [DONE]\n\n"
	costs := map[string]string{
		"plain":  "cost: 1",
		"header": "cost: {response_header: X-Tokens, max: 1000}",
		"json":   "cost: {response_json: usage.total_tokens, max: 1000}",
	}
	for _, body := range []string{"json", "stream"} {
		for _, cost := range []string{"plain", "header", "json"} {
			b.Run(body+"-"+cost, func(b *testing.B) {
				store := memstore.New()
				defer store.Close()
				mw, err := New(store, mustSet(b, "rules:\n  - name: tokens\n    key: [header:X-User-ID]\n    "+costs[cost]+"\n    limit: {algorithm: token_bucket, rate: 1000000, period: 1s, burst: 1000000000}\n"))
				if err != nil {
					b.Fatal(err)
				}
				h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header()["X-Tokens"] = []string{"102"}
					if body == "json" {
						w.Header()["Content-Type"] = []string{"application/json"}
						w.Write([]byte(json))
						return
					}
					w.Header()["Content-Type"] = []string{"text/event-stream"}
					for range events {
						w.Write([]byte(event))
					}
					w.Write([]byte(last))
				}))
				if body == "stream" {
					b.SetBytes(int64(events*len(event) + len(last)))
				}
				reqs := make([]*http.Request, 1024)
				for i := range reqs {
					reqs[i] = httptest.NewRequest("POST", "/v1/chat/completions", nil)
					reqs[i].Header.Set("X-User-ID", fmt.Sprint("user-", i))
				}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					w := &discard{h: http.Header{}}
					i := 0
					for pb.Next() {
						clear(w.h)
						h.ServeHTTP(w, reqs[i&1023])
						if w.h.Get(HeaderRetryAfter) != "" {
							b.Fatal("refused")
						}
						i++
					}
				})
			})
		}
	}
}
