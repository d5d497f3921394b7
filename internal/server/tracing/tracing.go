// Package tracing owns OpenTelemetry: the spans of the gateway and of
// `ratekeeper serve`, exported over OTLP when the SDK's standard
// environment asks for them. Off, a *Tracing is nil and every method does
// nothing: callers need no check of their own.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracing starts spans and exports them. A nil *Tracing is tracing off.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	fields   []string // the headers prop reads and writes
}

// FromEnv returns the tracing the environment asks for, or nil for none.
// OTEL_TRACES_EXPORTER=otlp turns it on (unset or "none": off, unlike the
// SDK's default, so that tracing costs nothing unless asked for). The
// exporter reads the other OTEL_EXPORTER_OTLP_* variables itself; the
// protocol is "http/protobuf" (the default) or "grpc". Any other value is
// an error naming the variable: a typo must not turn tracing off unseen.
func FromEnv(ctx context.Context, service, version string) (*Tracing, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch v := os.Getenv("OTEL_TRACES_EXPORTER"); v {
	case "", "none":
		return nil, nil
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: ratekeeper exports traces over \"otlp\" only (or \"none\")", v)
	}
	exp, err := exporter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceVersion(version),
	))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(service)))
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	return &Tracing{
		provider: p,
		tracer:   p.Tracer("github.com/ratekeeper/ratekeeper"),
		prop:     prop,
		fields:   prop.Fields(),
	}, nil
}

// exporter is the OTLP exporter of the protocol the environment names.
func exporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	name, proto := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		name, proto = "OTEL_EXPORTER_OTLP_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, fmt.Errorf("%s=%q: want \"http/protobuf\" or \"grpc\"", name, proto)
}

// Shutdown exports the spans not yet sent and stops.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Close is Shutdown for a server that stops: it waits for the export at
// most closeWait, even after ctx is done.
func (t *Tracing) Close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeWait)
	defer cancel()
	_ = t.Shutdown(ctx)
}

// closeWait bounds Close's wait for the last export.
const closeWait = 5 * time.Second

// Span is one span; the zero Span does nothing.
type Span struct{ s trace.Span }

// Server starts the span of a request received: a child of the trace
// context h carries (traceparent), or a new trace.
func (t *Tracing) Server(ctx context.Context, name string, h http.Header) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx = t.prop.Extract(ctx, propagation.HeaderCarrier(h))
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	return ctx, Span{s}
}

// ServerMetadata starts the span of a call received, as Server does, from
// the trace context in md: gRPC's incoming metadata, whose keys are lower
// case.
func (t *Tracing) ServerMetadata(ctx context.Context, name string, md map[string][]string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx = t.prop.Extract(ctx, metadataCarrier(md))
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	return ctx, Span{s}
}

// metadataCarrier reads and writes gRPC metadata for a propagator.
type metadataCarrier map[string][]string

func (m metadataCarrier) Get(key string) string {
	if v := m[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { m[strings.ToLower(key)] = []string{value} }

func (m metadataCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Internal starts a span of work within the current one.
func (t *Tracing) Internal(ctx context.Context, name string) (context.Context, Span) {
	return t.start(ctx, name, trace.SpanKindInternal)
}

// Client starts the span of a call to another service (Redis, the
// upstream).
func (t *Tracing) Client(ctx context.Context, name string) (context.Context, Span) {
	return t.start(ctx, name, trace.SpanKindClient)
}

func (t *Tracing) start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, Span) {
	if t == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, Span{} // no span without a recorded parent
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(kind))
	return ctx, Span{s}
}

// Call starts a client span named name for a call to a database system
// (db.system.name, such as "redis"). It returns the context for the call
// and the function that ends the span with the call's error. Without a
// recorded span in ctx it does nothing.
func (t *Tracing) Call(ctx context.Context, name, system string) (context.Context, func(error)) {
	ctx, s := t.Client(ctx, name)
	if s.s == nil {
		return ctx, func(error) {}
	}
	s.Str("db.system.name", system)
	return ctx, func(err error) {
		s.Fail(err)
		s.End()
	}
}

// Inject writes ctx's trace context into h, for the next hop, in place
// of the one h carried (traceparent, tracestate, baggage). So a client's
// context that Server could not parse does not reach the next hop beside
// the new trace's. Off, it leaves h as it is.
func (t *Tracing) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	for _, f := range t.fields {
		h.Del(f)
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// Recording reports whether s records: whether setting attributes on it
// is worth their cost.
func (s Span) Recording() bool { return s.s != nil && s.s.IsRecording() }

// Str sets a string attribute.
func (s Span) Str(key, value string) {
	if s.s != nil {
		s.s.SetAttributes(attribute.String(key, value))
	}
}

// Int sets an integer attribute.
func (s Span) Int(key string, value int) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Int(key, value))
	}
}

// Bool sets a boolean attribute.
func (s Span) Bool(key string, value bool) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Bool(key, value))
	}
}

// Fail marks s failed with err.
func (s Span) Fail(err error) {
	if s.s != nil && err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
}

// End ends s.
func (s Span) End() {
	if s.s != nil {
		s.s.End()
	}
}

// TraceID is the trace s belongs to, in hex; empty for the zero Span.
func (s Span) TraceID() string {
	if s.s == nil {
		return ""
	}
	return s.s.SpanContext().TraceID().String()
}
