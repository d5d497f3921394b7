package rls

import (
	"context"
	"net/http"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing"
)

// withTracing starts a ratekeeper.decide span per decision, under the
// caller's span, saying the store's mode is storeMode.
func withTracing(t *tracing.Tracing, storeMode string) Option {
	return optionFunc(func(c *config) {
		c.tracing = t
		c.storeMode = storeMode
	})
}

// endDecision sets the decision's attributes on span and ends it: the
// domain, the descriptors that matched a limit as /v1/top shows them, the
// result, the store's mode and whether its failure policy decided.
func (s *Service) endDecision(span tracing.Span, req *rlsv3.RateLimitRequest, slots []slot, resp *rlsv3.RateLimitResponse) {
	defer span.End()
	if !span.Recording() {
		return
	}
	span.Str("ratekeeper.domain", req.GetDomain())
	var matched []string
	fallback := false
	for i := range slots {
		sl := &slots[i]
		if sl.r == nil {
			continue
		}
		matched = append(matched, sl.r.stat+" "+displayKey(sl.r, req.GetDescriptors()[i]))
		fallback = fallback || sl.d.Fallback != ratekeeper.NoFallback
	}
	span.Int("ratekeeper.descriptors", len(slots))
	span.Str("ratekeeper.matched", strings.Join(matched, ", "))
	result := "allowed"
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		result = "refused"
	}
	span.Str("ratekeeper.result", result)
	span.Str("ratekeeper.store_mode", s.storeMode)
	span.Bool("ratekeeper.fallback", fallback)
}

// traceCalls is the gRPC interceptor that starts a server span per
// ShouldRateLimit call, continuing the trace of the call's metadata
// (traceparent). Other methods (health, reflection) are not traced.
func traceCalls(t *tracing.Tracing) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != rlsv3.RateLimitService_ShouldRateLimit_FullMethodName {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		ctx, span := t.ServerMetadata(ctx, strings.TrimPrefix(info.FullMethod, "/"), md)
		defer span.End()
		span.Str("rpc.system", "grpc")
		resp, err := handler(ctx, req)
		span.Int("rpc.grpc.status_code", int(status.Code(err)))
		span.Fail(err)
		return resp, err
	}
}

// traceRequests wraps the JSON API in a server span per request,
// continuing the trace its headers carry (traceparent).
func traceRequests(t *tracing.Tracing, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := t.Server(r.Context(), r.Method, r.Header)
		defer span.End()
		span.Str("http.request.method", r.Method)
		span.Str("url.path", r.URL.Path)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
