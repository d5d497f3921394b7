package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// serve runs a real gRPC server (the health service: Check is unary, Watch
// a server stream) behind the interceptor on loopback, and returns a
// client connected to it.
func serve(t *testing.T, i *grpclimit.Interceptor) healthpb.HealthClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(i.Unary()), grpc.ChainStreamInterceptor(i.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

func limiter(t *testing.T, store ratekeeper.Store, rate int) *ratekeeper.Limiter {
	t.Helper()
	l, err := ratekeeper.New(store, ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: rate, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func withKey(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
}

// TestUnary: calls within the limit pass with the rate limit fields as
// headers; the next is ResourceExhausted with them as trailers, and a
// retry-after; another key, and a call without the key's metadata, are not
// touched.
func TestUnary(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	i, err := grpclimit.New("per-key", limiter(t, store, 2), grpclimit.ByMetadata("X-Api-Key"))
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, i)
	for n, want := range []string{"1", "0"} {
		var hdr metadata.MD
		if _, err := c.Check(withKey("a"), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", n, err)
		}
		if got := hdr.Get("x-ratelimit-remaining"); len(got) != 1 || got[0] != want {
			t.Errorf("call %d: x-ratelimit-remaining %v, want %s", n, got, want)
		}
		if got := hdr.Get("ratelimit-policy"); len(got) != 1 || got[0] != `"per-key";q=2;w=60` {
			t.Errorf("call %d: ratelimit-policy %v", n, got)
		}
	}
	var trl metadata.MD
	_, err = c.Check(withKey("a"), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trl))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `rate limit "per-key" exceeded: retry in`) {
		t.Fatalf("third call: %v, want ResourceExhausted naming the limit", err)
	}
	if ra := trl.Get("retry-after"); len(ra) != 1 || ra[0] == "0" {
		t.Errorf("retry-after %v", ra)
	}
	if rl := trl.Get("ratelimit"); len(rl) != 1 || !strings.HasPrefix(rl[0], `"per-key";r=0;t=`) {
		t.Errorf("ratelimit trailer %v", rl)
	}
	if _, err := c.Check(withKey("b"), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("another key: %v", err)
	}
	for range 3 {
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("a call without the key's metadata: %v", err)
		}
	}
}

// TestStream: a stream is decided when it opens; a refused one ends with
// ResourceExhausted and the fields as trailers.
func TestStream(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	i, _ := grpclimit.New("streams", limiter(t, store, 1), grpclimit.ByPeer())
	c := serve(t, i)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	s2, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the second stream: %v, want ResourceExhausted", err)
	}
	if ra := s2.Trailer().Get("retry-after"); len(ra) != 1 {
		t.Errorf("the second stream's trailer: %v", s2.Trailer())
	}
}

// failing is a store that cannot answer.
type failing struct{}

var errDown = errors.New("connection refused")

func (failing) Take(context.Context, ratekeeper.Request) (ratekeeper.Decision, error) {
	return ratekeeper.Decision{}, errDown
}
func (failing) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error { return errDown }

// TestStoreDown: a store error lets the call through unless an error
// handler says otherwise; the failsafe store's deny policy answers
// Unavailable, not ResourceExhausted (no limit was used up), with a
// retry-after and no figures.
func TestStoreDown(t *testing.T) {
	open, _ := grpclimit.New("l", limiter(t, failing{}, 5), grpclimit.ByMethod())
	if _, err := serve(t, open).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("fail open by default: %v", err)
	}
	closed, _ := grpclimit.New("l", limiter(t, failing{}, 5), grpclimit.ByMethod(), grpclimit.WithErrorHandler(func(_ context.Context, err error) error {
		return status.Error(codes.Unavailable, "limiter down")
	}))
	if _, err := serve(t, closed).Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("with the error handler: %v", err)
	}
	fs := failsafe.New(failing{}, failsafe.WithPolicy(failsafe.Deny))
	defer fs.Close()
	deny, _ := grpclimit.New("l", limiter(t, fs, 5), grpclimit.ByMethod())
	var trl metadata.MD
	_, err := serve(t, deny).Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trl))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "store is unavailable") {
		t.Errorf("failsafe deny: %v, want Unavailable", err)
	}
	if len(trl.Get("retry-after")) != 1 || len(trl.Get("x-ratelimit-remaining")) != 0 {
		t.Errorf("failsafe deny's trailer: %v, want retry-after and no figures", trl)
	}
}

// TestCostNeverPasses: a cost above the limit's capacity is
// InvalidArgument, which a client does not retry.
func TestCostNeverPasses(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	i, _ := grpclimit.New("l", limiter(t, store, 5), grpclimit.ByMethod(),
		grpclimit.WithCost(func(context.Context, string) int { return 6 }))
	if _, err := serve(t, i).Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("cost 6 of 5: %v, want InvalidArgument", err)
	}
}

// TestKeys: the key functions, on contexts as a server sees them.
func TestKeys(t *testing.T) {
	const m = "/grpc.health.v1.Health/Check"
	in := func(addr string, md ...string) context.Context {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(md...))
		if addr != "" {
			ap := net.TCPAddrFromAddrPort(mustAddrPort(t, addr))
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: ap})
		}
		return ctx
	}
	for _, tt := range []struct {
		name string
		f    grpclimit.KeyFunc
		ctx  context.Context
		key  string
		ok   bool
	}{
		{"method", grpclimit.ByMethod(), in(""), m, true},
		{"peer v4", grpclimit.ByPeer(), in("10.1.2.3:5555"), "10.1.2.3", true},
		{"peer v4 in v6", grpclimit.ByPeer(), in("[::ffff:10.1.2.3]:5555"), "10.1.2.3", true},
		{"peer v6 by /64", grpclimit.ByPeer(), in("[2001:db8:1:2:aaaa::1]:5555"), "2001:db8:1:2::/64", true},
		{"no peer", grpclimit.ByPeer(), in(""), "", false},
		{"metadata", grpclimit.ByMetadata("X-User"), in("", "x-user", "u1"), "u1", true},
		// A proxy that appends: the client's own value comes first.
		{"metadata appended", grpclimit.ByMetadata("X-User"), in("", "x-user", "chosen-by-client", "x-user", "set-by-proxy"), "set-by-proxy", true},
		{"metadata absent", grpclimit.ByMetadata("x-user"), in(""), "", false},
		{"metadata empty", grpclimit.ByMetadata("x-user"), in("", "x-user", ""), "", false},
		{"first of", grpclimit.FirstOf(grpclimit.ByMetadata("x-user"), grpclimit.ByPeer()), in("10.0.0.1:1"), "10.0.0.1", true},
		{"join", grpclimit.Join(grpclimit.ByMethod(), grpclimit.ByMetadata("x-user")), in("", "x-user", "u"), "28:" + m + "|1:u", true},
		{"join without one", grpclimit.Join(grpclimit.ByMethod(), grpclimit.ByMetadata("x-user")), in(""), "", false},
	} {
		key, ok := tt.f(tt.ctx, m)
		if key != tt.key || ok != tt.ok {
			t.Errorf("%s: %q %v, want %q %v", tt.name, key, ok, tt.key, tt.ok)
		}
	}
	// Join cannot be fooled by a separator inside a key.
	j := grpclimit.Join(grpclimit.ByMetadata("a"), grpclimit.ByMetadata("b"))
	k1, _ := j(in("", "a", "x|1:y", "b", "z"), m)
	k2, _ := j(in("", "a", "x", "b", "y|1:z"), m)
	if k1 == k2 {
		t.Errorf("Join gave two different pairs one key: %q", k1)
	}
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// TestNewRefusesBadNames: a name that is not a token would break the
// ratelimit-policy field.
func TestNewRefusesBadNames(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	l := limiter(t, store, 1)
	for _, name := range []string{"", `a"b`, "a b", "a;b", "é"} {
		if _, err := grpclimit.New(name, l, grpclimit.ByMethod()); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if _, err := grpclimit.New("ok-name_1.2~", l, nil); err == nil {
		t.Error("a nil key function accepted")
	}
}
