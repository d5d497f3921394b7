package grpclimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestMetadataHashTagIsNotAnotherClientsKey: a client whose key metadata
// is another's wrapped in braces ("{victim}") neither shares that client's
// count on Redis (the store keeps a key's own hash tag, so "{victim}" and
// "victim" were one Redis key) nor chooses its Cluster slot.
func TestMetadataHashTagIsNotAnotherClientsKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := redisstore.Open(ctx, redistest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	i, err := grpclimit.New("per-key", limiter(t, store, 1), grpclimit.ByMetadata("x-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, i)
	if _, err := c.Check(withKey("{victim}"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("the attacker's call: %v", err)
	}
	if _, err := c.Check(withKey("victim"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("the victim's first call, after an attacker's with %q: %v", "{victim}", err)
	}
	// Behind grpc.UnknownServiceHandler (a gRPC proxy), the method is the
	// client's :path as it came.
	if k, _ := grpclimit.ByMethod()(context.Background(), "/{pin}.S/M"); strings.ContainsAny(k, "{}") {
		t.Errorf("ByMethod = %q: a brace is the client's hash tag", k)
	}
	for _, v := range []string{"{victim}", "a{pin}b", "}{", "{"} {
		in := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", v))
		if k, _ := grpclimit.ByMetadata("x-api-key")(in, "/m"); strings.ContainsAny(k, "{}") {
			t.Errorf("ByMetadata(%q) = %q: a brace is the client's hash tag", v, k)
		}
	}
}
