package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing/tracetest"
)

// With OTEL_TRACES_EXPORTER=otlp, a request's span continues the trace the
// client sent, the decision is its child, and the upstream sees the same
// trace with the request's span as parent. A refusal's span names the rule
// and the key as the admin shows it.
func TestTraces(t *testing.T) {
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	rcv := tracetest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.GRPC)
	t.Setenv("OTEL_SERVICE_NAME", "")
	seen := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Traceparent")
	}))
	defer up.Close()
	g := newTestGateway(t, "upstream: "+up.URL+`
rules:
  - name: per-key
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	if g.tracing == nil {
		t.Fatal("tracing is off")
	}
	send := func() int {
		r := httptest.NewRequest("GET", "/v1/x", nil)
		r.RemoteAddr = "192.0.2.1:4000"
		r.Header.Set("Traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
		r.Header.Set("X-API-Key", "sk_live_abc")
		w := httptest.NewRecorder()
		g.handler.ServeHTTP(w, r)
		return w.Code
	}
	if code := send(); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	if code := send(); code != 429 {
		t.Fatalf("second request: %d, want 429", code)
	}
	upstream := <-seen
	if err := g.tracing.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Await(t, 10*time.Second, func(s []tracetest.Span) bool { return len(s) == 4 })
	var requests, decisions []tracetest.Span
	for _, s := range spans {
		if s.TraceID != trace || s.Service != "ratekeeper-proxy" {
			t.Fatalf("span %+v: want trace %s, service ratekeeper-proxy", s, trace)
		}
		switch s.Name {
		case "GET":
			requests = append(requests, s)
		case "ratekeeper.decide":
			decisions = append(decisions, s)
		}
	}
	if len(requests) != 2 || len(decisions) != 2 {
		t.Fatalf("spans %+v: want two requests, each with its decision", spans)
	}
	parent := map[string]string{} // a request span's id -> its status
	for _, r := range requests {
		if r.ParentID != "00f067aa0ba902b7" || r.Kind != "server" {
			t.Fatalf("request span %+v: want a server span under the client's", r)
		}
		parent[r.SpanID] = r.Attrs["http.response.status_code"]
	}
	for _, d := range decisions {
		status, ok := parent[d.ParentID]
		if !ok {
			t.Fatalf("decision %+v: not a request span's child", d)
		}
		switch status {
		case "200":
			if d.Attrs["ratekeeper.result"] != "allowed" {
				t.Fatalf("the admitted request's decision: %+v", d.Attrs)
			}
		case "429":
			if d.Attrs["ratekeeper.result"] != "refused" || d.Attrs["ratekeeper.refused_by"] != "per-key" ||
				!strings.HasPrefix(d.Attrs["ratekeeper.key"], "fp:") || d.Attrs["ratekeeper.store_mode"] != "memory" {
				t.Fatalf("the refused request's decision: %+v", d.Attrs)
			}
		default:
			t.Fatalf("request status %q", status)
		}
	}
	// The upstream saw the trace, under the admitted request's span.
	var admitted string
	for id, status := range parent {
		if status == "200" {
			admitted = id
		}
	}
	if want := "00-" + trace + "-" + admitted + "-01"; upstream != want {
		t.Fatalf("upstream's traceparent %q, want %q", upstream, want)
	}
}

// A typo in the exporter stops the gateway at start, naming the variable.
func TestTracesTypo(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp-grpc")
	path := t.TempDir() + "/gw.yaml"
	if err := os.WriteFile(path, []byte("upstream: builtin:demo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), path, Options{}); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("New: %v; want an error naming OTEL_TRACES_EXPORTER", err)
	}
}

// On Redis, each store call is a client span under the decision's.
func TestTracesRedisCalls(t *testing.T) {
	rcv := tracetest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.HTTP)
	g := newTestGateway(t, `upstream: builtin:demo
store: {url: "`+redistest.Server(t)+`"}
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: token_bucket, rate: 5, period: 1m}
`)
	if code := clientGet(g, "192.0.2.1", "/v1/x"); code != 200 {
		t.Fatalf("request: %d", code)
	}
	if err := g.tracing.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Await(t, 10*time.Second, func(s []tracetest.Span) bool { return len(s) >= 3 })
	var decide, call tracetest.Span
	for _, s := range spans {
		switch {
		case s.Name == "ratekeeper.decide":
			decide = s
		case strings.HasPrefix(s.Name, "redis "):
			call = s
		}
	}
	if call.ParentID == "" || call.ParentID != decide.SpanID || call.Kind != "client" || call.Attrs["db.system.name"] != "redis" || call.Error {
		t.Fatalf("the Redis call's span %+v under decide %+v; spans %+v", call, decide, spans)
	}
}

// A client's trace context the gateway cannot parse starts a new trace,
// and the upstream sees only the gateway's: the client's traceparent and
// tracestate do not reach it, nor does baggage that does not parse. A
// valid one is continued with its tracestate and baggage.
func TestTracesInvalidTraceparent(t *testing.T) {
	const valid = "4bf92f3577b34da6a3ce929d0e0e4736"
	rcv := tracetest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.GRPC)
	seen := make(chan http.Header, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	defer up.Close()
	g := newTestGateway(t, "upstream: "+up.URL+"\n")
	for _, tc := range []struct {
		name, traceparent, sentBaggage string
		// The upstream's tracestate and baggage, and whether its trace is
		// the gateway's own.
		tracestate, baggage string
		newTrace            bool
	}{
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "user=alice", "", "user=alice", true},
		{"zero span id", "00-" + valid + "-0000000000000000-01", "user=alice", "", "user=alice", true},
		{"version ff", "ff-" + valid + "-00f067aa0ba902b7-01", "", "", "", true},
		{"not hex", "00-" + valid + "-00f067aa0ba902bz-01", "", "", "", true},
		{"garbage", "<script>", "", "", "", true},
		{"invalid baggage", "00-" + valid + "-00f067aa0ba902b7-01", "no equals sign", "vendor=secret", "", false},
		{"valid", "00-" + valid + "-00f067aa0ba902b7-01", "user=alice", "vendor=secret", "user=alice", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/x", nil)
			r.RemoteAddr = "192.0.2.1:4000"
			r.Header.Set("Traceparent", tc.traceparent)
			r.Header.Set("Tracestate", "vendor=secret")
			if tc.sentBaggage != "" {
				r.Header.Set("Baggage", tc.sentBaggage)
			}
			w := httptest.NewRecorder()
			g.handler.ServeHTTP(w, r)
			if w.Code != 200 {
				t.Fatalf("status %d", w.Code)
			}
			h := <-seen
			tp := h.Values("Traceparent")
			if len(tp) != 1 || len(tp[0]) != 55 || tp[0] == tc.traceparent {
				t.Fatalf("upstream's traceparent %q: want the gateway's one", tp)
			}
			if id := tp[0][3:35]; tc.newTrace == (id == valid) || id == strings.Repeat("0", 32) {
				t.Fatalf("upstream's trace %s (client sent %q): new trace %v wanted", id, tc.traceparent, tc.newTrace)
			}
			if got := strings.Join(h.Values("Tracestate"), ","); got != tc.tracestate {
				t.Errorf("upstream's tracestate %q, want %q", got, tc.tracestate)
			}
			if got := strings.Join(h.Values("Baggage"), ","); got != tc.baggage {
				t.Errorf("upstream's baggage %q, want %q", got, tc.baggage)
			}
		})
	}
}

// With tracing off the gateway is not a participant: the client's trace
// headers reach the upstream as they were sent, on either transport.
func TestTraceHeadersPassWithTracingOff(t *testing.T) {
	seen := make(chan http.Header, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	defer up.Close()
	want := map[string]string{"Traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "Tracestate": "vendor=secret", "Baggage": "no equals sign"}
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			addr := startGateway(t, transport, up.URL, "")
			req, _ := http.NewRequest("GET", "http://"+addr+"/v1/x", nil)
			for k, v := range want {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h := <-seen
			for k, v := range want {
				if got := h.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("upstream's %s %q, want %q", k, got, v)
				}
			}
		})
	}
}
