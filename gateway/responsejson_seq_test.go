package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"
)

// seqUpstream streams events as the test says. A stream (path .../seq)
// takes a step channel from steps, sends its first event (usage
// ?tokens= when given, else none), and waits for the step: then it sends
// the final event with usage ?final= and [DONE], or, with ?cut=1, aborts
// the connection. A path .../json is remaining's probe.
func seqUpstream(t *testing.T, steps chan chan struct{}) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if path.Base(r.URL.Path) == "json" {
			// Chunked, so that the probe has read it only once the
			// gateway is done with it.
			body := llmJSON(q.Get("tokens"))
			io.WriteString(w, body[:10])
			http.NewResponseController(w).Flush()
			io.WriteString(w, body[10:])
			return
		}
		var step chan struct{}
		select {
		case step = <-steps:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if tk := q.Get("tokens"); tk != "" {
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":%s}}\n\n", tk)
		} else {
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"w0\"}}],\"usage\":null}\n\n")
		}
		http.NewResponseController(w).Flush()
		select {
		case <-step:
		case <-r.Context().Done(): // a failed test's gateway closing
			return
		}
		if q.Get("cut") != "" {
			panic(http.ErrAbortHandler)
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"w1\"}}],\"usage\":null}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"total_tokens\":%s}}\n\ndata: [DONE]\n\n", q.Get("final"))
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// seqCases are streams and what each must cost: the usage of the last
// event, or, cut short, what the upstream had reported or the reserve
// (the default without one), whichever is larger.
var seqCases = []struct {
	query   string
	reserve bool
	cost    int
}{
	{"final=123", false, 123},
	{"final=123", true, 123},
	{"tokens=999&final=20", true, 20},
	{"cut=1", false, 50},
	{"cut=1", true, 200},
	{"tokens=300&cut=1", true, 300},
	{"tokens=30&cut=1", true, 200},
}

// TestResponseJSONStreamSequenced: an event stream metered by
// response_json is passed on as it comes: the client reads the first event
// before the upstream sends the next (the upstream waits for the client to
// have it). Whole, it costs the usage of its last event; cut short by the
// upstream, the client sees it cut, and it costs at least the reserve or
// default. Over HTTP/1.1 and h2c on both transports.
func TestResponseJSONStreamSequenced(t *testing.T) {
	steps := make(chan chan struct{}, 1)
	up := seqUpstream(t, steps)
	rule := func(reserve string) string {
		return `h2c: true
rules:
  - name: tokens
    key: [header:Authorization]
    cost: {response_json: usage.total_tokens, max: 1000, default: 50` + reserve + `}
    limit: {algorithm: token_bucket, rate: 1000, period: 24h}
`
	}
	for _, transport := range []string{"fast", "standard"} {
		plain, reserved := startGateway(t, transport, up, rule("")), startGateway(t, transport, up, rule(", reserve: 200"))
		for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
			for i, tc := range seqCases {
				addr := plain
				if tc.reserve {
					addr = reserved
				}
				key := fmt.Sprintf("%s-%s-%d", transport, proto, i)
				what := fmt.Sprintf("%s %s %s reserve %v", transport, proto, tc.query, tc.reserve)
				step := make(chan struct{})
				steps <- step
				target := "/v1/seq?" + tc.query
				if proto == "HTTP/2" {
					streamH2(t, what, addr, key, target, step)
				} else {
					streamH1(t, what, addr, key, target, step)
				}
				deadline := time.Now().Add(10 * time.Second)
				for {
					got := 1000 - remaining(t, addr, key)
					if tc.reserve {
						got -= 199 // the probe's own reserve, less the unit remaining gives back
					}
					if got >= tc.cost-1 && got <= tc.cost {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: cost %d, want %d", what, got, tc.cost)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
	}
}

// streamH1 posts target as key over HTTP/1.1, reads the first event, lets
// the upstream go on, and reads the rest: whole, or cut when the target
// says so.
func streamH1(t *testing.T, what, addr, key, target string, step chan struct{}) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second)) // against a hang (a buffered stream), not a wait
	fmt.Fprintf(nc, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n\r\n", target, key)
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data: {") {
		t.Fatalf("%s: the first event before the upstream sent more: %q %v", what, first, err)
	}
	close(step)
	rest, err := io.ReadAll(br)
	cut := strings.Contains(target, "cut=")
	switch {
	case cut && err == nil:
		t.Errorf("%s: a stream the upstream cut ended cleanly for the client (%q)", what, rest)
	case !cut && (err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n")):
		t.Errorf("%s: the rest of the stream: %q %v", what, rest, err)
	}
}

// streamH2 is streamH1 over h2c.
func streamH2(t *testing.T, what, addr, key, target string, step chan struct{}) {
	c := dialH2C(t, addr)
	id := c.open(true, ":method", "POST", ":scheme", "http", ":authority", "x", ":path", target, "authorization", "Bearer "+key, "content-length", "0")
	a := c.answers[id]
	for !strings.Contains(a.body.String(), "\n\n") && !a.done && c.dead == nil {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("%s: the first event before the upstream sent more: %q %v", what, a.body.String(), err)
		}
		c.handle(f)
	}
	if !strings.HasPrefix(a.body.String(), "data: {") || a.done {
		t.Fatalf("%s: the first event before the upstream sent more: %s %q", what, a, a.body.String())
	}
	close(step)
	c.wait(id)
	cut := strings.Contains(target, "cut=")
	switch {
	case cut && !a.wasRst && !a.lost:
		t.Errorf("%s: a stream the upstream cut ended cleanly for the client (%q)", what, a.body.String())
	case !cut && (a.wasRst || !strings.HasSuffix(a.body.String(), "data: [DONE]\n\n")):
		t.Errorf("%s: the rest of the stream: %s %q", what, a, a.body.String())
	}
}
