package rls

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/internal/server/tracing"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing/tracetest"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// BenchmarkDecide measures the service without gRPC: matching, keys, the
// memory store and the response, for each algorithm, over 10,000 keys. The
// service counts its limited clients as serve's does; tracing is off.
// bench/run-rls.sh measures the whole service over gRPC and Redis.
func BenchmarkDecide(b *testing.B) {
	c, err := Load("../bench/rlsconf/ratekeeper.yaml")
	if err != nil {
		b.Fatal(err)
	}
	rules, err := Compile(c)
	if err != nil {
		b.Fatal(err)
	}
	for _, alg := range []string{"fixed_window", "token_bucket", "leaky_bucket", "sliding_window", "sliding_log"} {
		b.Run("alg="+alg, func(b *testing.B) {
			ms := memstore.New()
			defer ms.Close()
			reg := prometheus.NewRegistry()
			sm, err := NewMetrics(reg, nil)
			if err != nil {
				b.Fatal(err)
			}
			svc := NewService(ms, rules, WithMetrics(sm), withTop(newBoard()))
			reqs := make([]*rlsv3.RateLimitRequest, 10000)
			for i := range reqs {
				reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: alg, Value: "k" + strconv.Itoa(i)}},
				}}}
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, err := svc.Decide(context.Background(), reqs[next.Add(1)%int64(len(reqs))])
					if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("%v %v", r, err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkDecideTraced is BenchmarkDecide's fixed window with tracing on:
// each decision under a server span that continues a traceparent, as a
// traced ShouldRateLimit call is, exported to an OTLP receiver.
func BenchmarkDecideTraced(b *testing.B) {
	c, err := Load("../bench/rlsconf/ratekeeper.yaml")
	if err != nil {
		b.Fatal(err)
	}
	rules, err := Compile(c)
	if err != nil {
		b.Fatal(err)
	}
	rcv := tracetest.Start(b)
	b.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.GRPC)
	tr, err := tracing.FromEnv(context.Background(), "bench", "")
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	ms := memstore.New()
	defer ms.Close()
	svc := NewService(ms, rules, withTop(newBoard()), withTracing(tr, "memory"))
	reqs := make([]*rlsv3.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "fixed_window", Value: "k" + strconv.Itoa(i)}},
		}}}
	}
	md := map[string][]string{"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, span := tr.ServerMetadata(context.Background(), "ShouldRateLimit", md)
			_, err := svc.Decide(ctx, reqs[next.Add(1)%int64(len(reqs))])
			span.End()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
