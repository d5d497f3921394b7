package rls

import (
	"bytes"
	"math"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func entries(kv ...string) []*ratelimitv3.RateLimitDescriptor_Entry {
	var out []*ratelimitv3.RateLimitDescriptor_Entry
	for i := 0; i < len(kv); i += 2 {
		out = append(out, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// codecRequests are requests of every shape: those read by hand and those
// left to proto.
var codecRequests = []*rlsv3.RateLimitRequest{
	{},
	{Domain: "bench"},
	{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("fixed_window", "k1")}}},
	{Domain: "d", HitsAddend: 7, Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("a", "1", "b", "", "", "3", "d", "4")}}},
	{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("a", "1", "b", "2", "c", "3", "d", "4", "e", "5")}}},
	{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("a", "1")}, {Entries: entries("b", "2", "c", "3")}, {}}},
	{Domain: "ünïcödé", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("ключ", "值")}}},
	// Left to proto.
	{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("a", "1"),
		Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}}}},
	{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("a", "1"), HitsAddend: wrapperspb.UInt64(3)}}},
	{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries("a", "1"), IsNegativeHits: true}}},
}

// TestCodecRequest: the codec reads every request as proto.Unmarshal does.
func TestCodecRequest(t *testing.T) {
	c := newCodec()
	for _, want := range codecRequests {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		// Whole, and split across buffers as gRPC may hand it over.
		for _, data := range []mem.BufferSlice{{mem.SliceBuffer(b)}, split(b)} {
			got := new(rlsv3.RateLimitRequest)
			if err := c.Unmarshal(data, got); err != nil {
				t.Fatalf("%v: %v", want, err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("read %v, want %v", got, want)
			}
		}
	}
}

func split(b []byte) mem.BufferSlice {
	h := len(b) / 2
	return mem.BufferSlice{mem.SliceBuffer(b[:h:h]), mem.SliceBuffer(b[h:])}
}

// TestCodecRequestFastPath: the usual request is read by hand, in two
// allocations; a descriptor's override goes to proto.
func TestCodecRequestFastPath(t *testing.T) {
	b, _ := proto.Marshal(codecRequests[2])
	if !readRequest(b, new(rlsv3.RateLimitRequest)) {
		t.Error("a request of one descriptor was not read by hand")
	}
	b, _ = proto.Marshal(codecRequests[7])
	r := new(rlsv3.RateLimitRequest)
	if readRequest(b, r) || r.Domain != "" || r.Descriptors != nil {
		t.Errorf("a request with a limit override was read by hand (%v)", r)
	}
	b, _ = proto.Marshal(codecRequests[2])
	allocs := testing.AllocsPerRun(100, func() { readRequest(b, new(rlsv3.RateLimitRequest)) })
	if allocs > 3 { // the request itself, the string, the block
		t.Errorf("%v allocations per request, want 3", allocs)
	}
}

// TestCodecRequestInvalid: what proto refuses, the codec refuses.
func TestCodecRequestInvalid(t *testing.T) {
	good, _ := proto.Marshal(codecRequests[3])
	badUTF8 := protowire.AppendTag(nil, reqDomain, protowire.BytesType)
	badUTF8 = protowire.AppendBytes(badUTF8, []byte{0xff, 0xfe})
	for name, b := range map[string][]byte{
		"truncated": good[:len(good)-1],
		"utf8":      badUTF8,
		"wire type": protowire.AppendVarint(protowire.AppendTag(nil, reqDomain, protowire.VarintType), 1),
	} {
		err := newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, new(rlsv3.RateLimitRequest))
		if perr := proto.Unmarshal(b, new(rlsv3.RateLimitRequest)); (err == nil) != (perr == nil) {
			t.Errorf("%s: codec error %v, proto error %v", name, err, perr)
		}
	}
}

// FuzzCodecRequest: on any input, the codec and proto.Unmarshal agree on
// the error and on the message.
func FuzzCodecRequest(f *testing.F) {
	for _, r := range codecRequests {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(rlsv3.RateLimitRequest)
		werr := proto.Unmarshal(b, want)
		got := new(rlsv3.RateLimitRequest)
		gerr := newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("codec error %v, proto error %v", gerr, werr)
		}
		if werr == nil && !proto.Equal(got, want) {
			t.Fatalf("read %v, want %v", got, want)
		}
	})
}

// TestCodecResponse: the codec writes responses byte for byte as
// proto.Marshal does, by hand or through proto.
func TestCodecResponse(t *testing.T) {
	lim := &rlsv3.RateLimitResponse_RateLimit{Name: "per-user", RequestsPerUnit: 100, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
	for _, r := range []*rlsv3.RateLimitResponse{
		{},
		{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32},
			{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: lim, DurationUntilReset: &durationpb.Duration{Seconds: 59, Nanos: 999_999_999}},
			{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{}, LimitRemaining: 3, DurationUntilReset: &durationpb.Duration{}},
			{Code: rlsv3.RateLimitResponse_OK, DurationUntilReset: &durationpb.Duration{Seconds: -1, Nanos: -5}},
			{Code: rlsv3.RateLimitResponse_Code(-2)},
		}, ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit-Limit", Value: "100, 100;w=60"}, {Key: "Retry-After"}, {}}},
		// Left to proto.
		{RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "k", Value: "v"}}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "k", RawValue: []byte("v")}}},
		{RawBody: []byte("body")},
		{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewBoolValue(true)}}},
		{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 1}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 1}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(2)}}}},
	} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		data, err := newCodec().Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Errorf("%v:\nwrote %x\nwant  %x", r, got, want)
		}
	}
}

// TestCodecOthers: other messages go through proto both ways.
func TestCodecOthers(t *testing.T) {
	c := newCodec()
	in := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	data, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := new(healthpb.HealthCheckResponse)
	if err := c.Unmarshal(data, out); err != nil || !proto.Equal(in, out) {
		t.Errorf("read %v (%v), want %v", out, err, in)
	}
}

// BenchmarkCodec compares the codec with gRPC's proto codec on the usual
// request and response.
func BenchmarkCodec(b *testing.B) {
	req, _ := proto.Marshal(codecRequests[2])
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
		Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 999_999_999, DurationUntilReset: &durationpb.Duration{Nanos: 250_000_000},
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1_000_000_000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
	}}}
	for name, c := range map[string]interface {
		Marshal(any) (mem.BufferSlice, error)
		Unmarshal(mem.BufferSlice, any) error
	}{"impl=codec": newCodec(), "impl=proto": newCodec().proto} {
		b.Run("msg=request/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(req)}, new(rlsv3.RateLimitRequest)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("msg=response/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Marshal(resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
