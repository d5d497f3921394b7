// Package grpcmw holds grpclimit to go-grpc-middleware v2's ratelimit
// interceptors: an Interceptor is their Limiter without grpclimit importing
// that module, which stays out of the main module's dependencies (bench/ is
// its own module).
package grpcmw

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/memstore"
)

var _ ratelimit.Limiter = (*grpclimit.Interceptor)(nil)

// TestRatelimitAdapter: behind ratelimit.UnaryServerInterceptor, calls
// within the limit pass and the next is ResourceExhausted, with the rate
// limit fields as trailers, keyed by method.
func TestRatelimitAdapter(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	l, err := ratekeeper.New(store, ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	i, err := grpclimit.New("per-method", l, grpclimit.ByMethod())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(i)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	defer srv.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := healthpb.NewHealthClient(cc)
	for n := range 2 {
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", n, err)
		}
	}
	var trl metadata.MD
	_, err = c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trl))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "per-method") {
		t.Fatalf("third call: %v, want ResourceExhausted naming the limit", err)
	}
	if len(trl.Get("retry-after")) != 1 || len(trl.Get("ratelimit")) != 1 {
		t.Errorf("trailer %v, want retry-after and ratelimit", trl)
	}
}
