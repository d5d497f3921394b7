package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkStreamLatency is an event stream's latency through the
// gateway: the time to the first event (ttfb-µs), and from the upstream
// writing each later event to the client reading it (event-µs), the
// upstream waiting for the client to read one event before writing the
// next. "plain" is a rule with a fixed cost, "response_json" one that
// meters the stream's usage.
func BenchmarkStreamLatency(b *testing.B) {
	const events = 20
	sent := make(chan time.Time, 1)
	ack := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range events {
			sent <- time.Now()
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"w%d\"}}],\"usage\":null}\n\n", i)
			rc.Flush()
			<-ack
		}
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":1}}\n\ndata: [DONE]\n\n")
	}))
	b.Cleanup(up.Close)
	for _, tc := range []struct{ name, transport, cost string }{
		{"plain-fast", "fast", "cost: 1"},
		{"plain-standard", "standard", "cost: 1"},
		{"response_json", "fast", "cost: {response_json: usage.total_tokens, max: 100}"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			addr := startGateway(b, tc.transport, up.URL, "rules:\n  - name: tokens\n    key: [header:Authorization]\n    "+tc.cost+"\n    limit: {algorithm: token_bucket, rate: 1000000, period: 1s, burst: 1000000}\n")
			client := &http.Client{Transport: &http.Transport{}}
			var ttfb, event time.Duration
			for b.Loop() {
				req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
				req.Header.Set("Authorization", "Bearer k")
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				br := bufio.NewReader(resp.Body)
				for i := range events {
					at := <-sent
					if _, err := br.ReadString('\n'); err != nil {
						b.Fatal(err)
					}
					if i == 0 {
						ttfb += time.Since(start)
					} else {
						event += time.Since(at)
					}
					br.ReadString('\n') // the blank line
					ack <- struct{}{}
				}
				io.Copy(io.Discard, br)
				resp.Body.Close()
			}
			b.ReportMetric(float64(ttfb.Microseconds())/float64(b.N), "ttfb-µs")
			b.ReportMetric(float64(event.Microseconds())/float64(b.N*(events-1)), "event-µs")
		})
	}
}
