package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// A gRPC service behind the gateway, called by a real grpc-go client:
// unary calls, a server stream and a bidirectional stream pass through
// with their trailers; a rule on a method refuses the call over its limit
// with RESOURCE_EXHAUSTED and the rate limit fields as metadata.

// startGRPCUpstream serves the health and reflection services over h2c
// and returns the address and the health server (to change statuses).
func startGRPCUpstream(t *testing.T) (string, *health.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String(), hs
}

const grpcRules = "upstream_protocol: h2\nrules:\n" +
	"  - name: health-check\n    match: {path: /grpc.health.v1.Health/Check}\n    limit: {algorithm: fixed_window, rate: 2, period: 1m}\n"

func TestGRPCThroughTheGateway(t *testing.T) {
	e := newEdge(t)
	upAddr, hs := startGRPCUpstream(t)
	for _, tc := range []struct {
		name  string
		extra string
		creds credentials.TransportCredentials
	}{
		{"h2 over TLS", e.tlsSection(), credentials.NewTLS(&tls.Config{RootCAs: e.ca.Pool()})},
		{"h2c", "h2c: true\n", insecure.NewCredentials()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := runGateway(t, "fast", "http://"+upAddr, tc.extra+grpcRules)
			cc, err := grpc.NewClient("localhost:"+portOf(g.Addr()), grpc.WithTransportCredentials(tc.creds))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			client := healthpb.NewHealthClient(cc)

			// Unary, within the limit; then refused.
			for i := range 2 {
				var hdr metadata.MD
				resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "orders"}, grpc.Header(&hdr))
				if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
					t.Fatalf("call %d: %v %v", i, resp, err)
				}
				if got := hdr.Get("x-ratelimit-remaining"); len(got) != 1 || got[0] != []string{"1", "0"}[i] {
					t.Errorf("call %d: x-ratelimit-remaining %v", i, got)
				}
			}
			var hdr, trl metadata.MD
			_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "orders"}, grpc.Header(&hdr), grpc.Trailer(&trl))
			st := status.Convert(err)
			if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), `"health-check"`) {
				t.Fatalf("over the limit: %v", err)
			}
			md := metadata.Join(hdr, trl)
			for _, k := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after", "ratelimit-policy", "ratelimit"} {
				if len(md.Get(k)) == 0 {
					t.Errorf("the refusal's metadata lacks %s: %v", k, md)
				}
			}

			// The upstream's own status travels in its trailers.
			_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "unknown"}, grpc.WaitForReady(true))
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("a fourth Check: %v (the limit counts every call to the method)", err)
			}

			// A server stream: each message arrives as it is sent, not
			// when the stream ends.
			watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "orders"})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("first message: %v %v", m, err)
			}
			hs.SetServingStatus("orders", healthpb.HealthCheckResponse_NOT_SERVING)
			if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Fatalf("second message: %v %v", m, err)
			}
			hs.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
			if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("third message: %v %v", m, err)
			}

			// A bidirectional stream: each request answered before the
			// next is sent.
			bidi, err := reflectpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, svc := range []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
				if err := bidi.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}}); err != nil {
					t.Fatal(err)
				}
				r, err := bidi.Recv()
				if err != nil || r.GetFileDescriptorResponse() == nil {
					t.Fatalf("bidi %s: %v %v", svc, r, err)
				}
			}
			// An error from the upstream, in its trailers.
			if err := bidi.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "no.such.Service"}}); err != nil {
				t.Fatal(err)
			}
			if r, err := bidi.Recv(); err != nil || r.GetErrorResponse().GetErrorCode() != int32(codes.NotFound) {
				t.Fatalf("bidi unknown symbol: %v %v", r, err)
			}
			bidi.CloseSend()
			if _, err := bidi.Recv(); err == nil || status.Code(err) != codes.OK && err.Error() != "EOF" {
				t.Errorf("bidi end: %v", err)
			}
		})
	}
}

// portOf is addr's port.
func portOf(addr net.Addr) string {
	_, p, _ := net.SplitHostPort(addr.String())
	return p
}
