// Package tracetest is an OTLP trace receiver for tests: it serves the
// protocol over gRPC and HTTP with the protocol's own Go types, and keeps
// every span it receives.
package tracetest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one span received, its ids in hex.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Kind                      string // "server", "client", "internal"...
	Attrs                     map[string]string
	Service                   string
	Error                     bool
}

// Receiver keeps the spans it receives.
type Receiver struct {
	GRPC string // host:port of its gRPC server
	HTTP string // base URL of its HTTP server (spans at /v1/traces)

	collector.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []Span
}

// Start starts a Receiver on loopback ports, stopped when t ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collector.RegisterTraceServiceServer(gs, r)
	go gs.Serve(gl)
	t.Cleanup(gs.Stop)
	r.GRPC = gl.Addr().String()

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(r.serveHTTP)}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	r.HTTP = "http://" + hl.Addr().String()
	return r
}

// Export implements the gRPC trace service.
func (r *Receiver) Export(_ context.Context, req *collector.ExportTraceServiceRequest) (*collector.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collector.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = z
	}
	b, err := io.ReadAll(body)
	var m collector.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&m)
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *Receiver) add(req *collector.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, Span{
					TraceID:  hex.EncodeToString(s.TraceId),
					SpanID:   hex.EncodeToString(s.SpanId),
					ParentID: hex.EncodeToString(s.ParentSpanId),
					Name:     s.Name,
					Kind:     kindName(int32(s.Kind)),
					Attrs:    attrs(s.Attributes),
					Service:  service,
					Error:    s.GetStatus().GetCode() == 2, // STATUS_CODE_ERROR
				})
			}
		}
	}
}

func kindName(k int32) string {
	switch k {
	case 1:
		return "internal"
	case 2:
		return "server"
	case 3:
		return "client"
	case 4:
		return "producer"
	case 5:
		return "consumer"
	}
	return "unspecified"
}

func attrs(kvs []*common.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *common.AnyValue_StringValue:
			m[kv.Key] = x.StringValue
		default:
			m[kv.Key] = protoText(v)
		}
	}
	return m
}

// protoText renders a non-string attribute value as its scalar text.
func protoText(v *common.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *common.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *common.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return v.String()
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Await polls the spans received until ok accepts them, and fails t if
// it has not within timeout.
func (r *Receiver) Await(t testing.TB, timeout time.Duration, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := r.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans received within %v do not satisfy the test: %+v", timeout, spans)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
