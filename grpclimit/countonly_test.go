package grpclimit_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// With WithCountOnly(codes.OK), calls that fail (NotFound: an unknown
// service) are never counted; two that succeed spend the limit, and the
// next call, whatever it asks, is refused with a retry-after.
func TestCountOnlyCountsByCode(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	i, err := grpclimit.New("ok-calls", limiter(t, store, 2), grpclimit.ByMetadata("x-api-key"), grpclimit.WithCountOnly(codes.OK))
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, i)
	call := func(service string) error {
		_, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{Service: service})
		return err
	}
	for n, s := range []string{"nope", "nope", "", "nope", "nope", ""} {
		want := codes.NotFound
		if s == "" {
			want = codes.OK
		}
		if got := status.Code(call(s)); got != want {
			t.Fatalf("call %d: %v, want %v", n, got, want)
		}
	}
	for _, s := range []string{"", "nope"} {
		var tr metadata.MD
		_, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{Service: s}, grpc.Trailer(&tr))
		if status.Code(err) != codes.ResourceExhausted || len(tr.Get("retry-after")) != 1 {
			t.Errorf("after two OK calls: %v, trailers %v", err, tr)
		}
	}
	if got := status.Code(call("")); got != codes.ResourceExhausted {
		t.Errorf("still refused: %v", got)
	}
	if _, err := c.Check(withKey("b"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("another key: %v", err)
	}
	if got := status.Code(i.Limit(context.Background())); got != codes.FailedPrecondition {
		t.Errorf("Limit with WithCountOnly: %v, want FailedPrecondition", got)
	}
}

func TestCountOnlyRefusedOptions(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	one := func(context.Context, string) int { return 1 }
	for name, opts := range map[string][]grpclimit.Option{
		"no codes":     {grpclimit.WithCountOnly()},
		"unknown code": {grpclimit.WithCountOnly(codes.Code(17))},
		"with a cost":  {grpclimit.WithCountOnly(codes.OK), grpclimit.WithCost(one)},
	} {
		if _, err := grpclimit.New("x", limiter(t, store, 1), grpclimit.ByMethod(), opts...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
