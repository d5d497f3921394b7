package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fakeRLS answers by the descriptor's value: k0 OK, k1 OVER_LIMIT, k2 a
// gRPC error, k3 an answer without overall_code (UNKNOWN).
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.calls.Add(1)
	if req.GetDomain() != "bench" || len(req.GetDescriptors()) != 1 || len(req.GetDescriptors()[0].GetEntries()) != 1 {
		return nil, status.Error(codes.InvalidArgument, "unexpected request")
	}
	switch req.GetDescriptors()[0].GetEntries()[0].GetValue() {
	case "k0":
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 7}}}, nil
	case "k1":
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
	case "k2":
		return nil, status.Error(codes.Unavailable, "store down")
	}
	return &rlsv3.RateLimitResponse{}, nil
}

// fakeGubernator answers by the unique key: k0 under the limit, k1 over
// it, k2 with an error string, k3 with two responses.
type fakeGubernator struct {
	gubernator.UnimplementedV1Server
}

func (fakeGubernator) GetRateLimits(_ context.Context, req *gubernator.GetRateLimitsReq) (*gubernator.GetRateLimitsResp, error) {
	r := &gubernator.RateLimitResp{Limit: 10, Remaining: 3, Metadata: map[string]string{"owner": "x"}}
	switch req.GetRequests()[0].GetUniqueKey() {
	case "k1":
		r.Status = gubernator.Status_OVER_LIMIT
	case "k2":
		r.Error = "no such algorithm"
	case "k3":
		return &gubernator.GetRateLimitsResp{Responses: []*gubernator.RateLimitResp{r, r}}, nil
	}
	return &gubernator.GetRateLimitsResp{Responses: []*gubernator.RateLimitResp{r}}, nil
}

func serve(t *testing.T, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	register(gs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

func TestLeanEnvoy(t *testing.T) {
	srv := &fakeRLS{}
	addr := serve(t, func(gs *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(gs, srv) })
	lc, err := newLeanClient(addr, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	call := leanEnvoyCaller(lc, "fixed_window", 4)
	ctx := context.Background()
	for round := range 3 { // the first call adds the headers to the server's table, the later ones index them
		if ok, err := call(ctx, 0, 0); !ok || err != nil {
			t.Fatalf("round %d, k0: %v, %v; want allowed", round, ok, err)
		}
		if ok, err := call(ctx, 0, 1); ok || err != nil {
			t.Fatalf("round %d, k1: %v, %v; want over the limit", round, ok, err)
		}
		if _, err := call(ctx, 0, 2); err == nil || !strings.Contains(err.Error(), "grpc-status 14: store down") {
			t.Fatalf("round %d, k2: %v; want grpc-status 14", round, err)
		}
		if _, err := call(ctx, 0, 3); err == nil || !strings.Contains(err.Error(), "overall_code 0") {
			t.Fatalf("round %d, k3: %v; want an error for UNKNOWN", round, err)
		}
	}
}

func TestLeanGubernator(t *testing.T) {
	addr := serve(t, func(gs *grpc.Server) { gubernator.RegisterV1Server(gs, fakeGubernator{}) })
	lc, err := newLeanClient(addr, gubernator.V1_GetRateLimits_FullMethodName, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	call := leanGubernatorCaller(lc, "token_bucket", 4)
	ctx := context.Background()
	for round := range 2 {
		if ok, err := call(ctx, 0, 0); !ok || err != nil {
			t.Fatalf("round %d, k0: %v, %v; want allowed", round, ok, err)
		}
		if ok, err := call(ctx, 0, 1); ok || err != nil {
			t.Fatalf("round %d, k1: %v, %v; want over the limit", round, ok, err)
		}
		if _, err := call(ctx, 0, 2); err == nil || err.Error() != "no such algorithm" {
			t.Fatalf("round %d, k2: %v; want the response's error", round, err)
		}
		if _, err := call(ctx, 0, 3); err == nil || !strings.Contains(err.Error(), "2 responses") {
			t.Fatalf("round %d, k3: %v; want an error for two responses", round, err)
		}
	}
}

// TestLeanConcurrent runs many callers over few connections to a server
// that allows 3 streams per connection and has small windows (so that
// credit is returned both ways): every call must be answered, none
// refused.
func TestLeanConcurrent(t *testing.T) {
	srv := &fakeRLS{}
	addr := serve(t, func(gs *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(gs, srv) },
		grpc.MaxConcurrentStreams(3), grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(64<<10))
	const callers, calls = 32, 300
	lc, err := newLeanClient(addr, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, 2, callers)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	call := leanEnvoyCaller(lc, "fixed_window", 1)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				ok, err := call(context.Background(), c, i)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := allowed.Load(); got != callers*calls || srv.calls.Load() != callers*calls {
		t.Errorf("%d calls allowed, %d served; want %d", got, srv.calls.Load(), callers*calls)
	}
}

// TestLeanClosed: calls on a connection the server closed fail, and do
// not hang.
func TestLeanClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, &fakeRLS{})
	go gs.Serve(ln)
	lc, err := newLeanClient(ln.Addr().String(), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	call := leanEnvoyCaller(lc, "fixed_window", 1)
	if ok, err := call(context.Background(), 0, 0); !ok || err != nil {
		t.Fatalf("%v, %v; want allowed", ok, err)
	}
	gs.Stop()
	if _, err := call(context.Background(), 0, 0); err == nil {
		t.Fatal("a call after the server stopped succeeded")
	}
}

func FuzzOverallCode(f *testing.F) {
	for _, m := range []*rlsv3.RateLimitResponse{{}, {OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT},
		{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: 2}}}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := overallCode(b)
		var m rlsv3.RateLimitResponse
		if uerr := proto.Unmarshal(b, &m); uerr != nil {
			return // overallCode reads less and may accept what proto rejects
		}
		if err != nil {
			t.Fatalf("overallCode: %v; proto.Unmarshal accepts it", err)
		}
		if int32(got) != int32(m.OverallCode) {
			t.Fatalf("overallCode %d, proto %d", got, m.OverallCode)
		}
	})
}

func FuzzGubernatorStatus(f *testing.F) {
	for _, m := range []*gubernator.GetRateLimitsResp{{}, {Responses: []*gubernator.RateLimitResp{{Status: 1, Error: "x"}}},
		{Responses: []*gubernator.RateLimitResp{{Remaining: 3, Metadata: map[string]string{"a": "b"}}}}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, errText, err := gubernatorStatus(b)
		var m gubernator.GetRateLimitsResp
		if uerr := proto.Unmarshal(b, &m); uerr != nil {
			return
		}
		if len(m.Responses) != 1 {
			if err == nil {
				t.Fatalf("%d responses accepted", len(m.Responses))
			}
			return
		}
		if err != nil {
			t.Fatalf("gubernatorStatus: %v; proto.Unmarshal accepts it", err)
		}
		if int32(st) != int32(m.Responses[0].Status) || errText != m.Responses[0].Error {
			t.Fatalf("gubernatorStatus %d %q, proto %d %q", st, errText, m.Responses[0].Status, m.Responses[0].Error)
		}
	})
}

// hangingRLS answers only when released.
type hangingRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	release chan struct{}
}

func (h *hangingRLS) ShouldRateLimit(ctx context.Context, _ *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestLeanCancel: calls waiting on a service that does not answer return
// when their context ends, and the connection is given up.
func TestLeanCancel(t *testing.T) {
	h := &hangingRLS{release: make(chan struct{})}
	defer close(h.release)
	addr := serve(t, func(gs *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(gs, h) })
	const callers = 8
	lc, err := newLeanClient(addr, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, 1, callers)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	call := leanEnvoyCaller(lc, "fixed_window", 1)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, callers)
	for c := range callers {
		go func() {
			_, err := call(ctx, c, 0)
			errs <- err
		}()
	}
	cancel()
	for range callers {
		if err := <-errs; err == nil {
			t.Error("a call on a hung service returned no error")
		}
	}
	if _, err := call(context.Background(), 0, 0); err == nil {
		t.Error("a call after a cancelled one succeeded on a connection given up")
	}
}
