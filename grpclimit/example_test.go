package grpclimit_test

import (
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// A limit per API key, or per client address for calls without one, on a
// gRPC server's unary and streaming calls.
func ExampleNew() {
	store := memstore.New()
	defer store.Close()
	perKey, err := ratekeeper.New(store, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 100, Period: time.Second})
	if err != nil {
		panic(err)
	}
	i, err := grpclimit.New("per-key", perKey,
		grpclimit.FirstOf(grpclimit.ByMetadata("x-api-key"), grpclimit.ByPeer()))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(i.Unary()), grpc.ChainStreamInterceptor(i.Stream()))
	defer srv.Stop()
	fmt.Println("serving with the limit per-key")
	// Output: serving with the limit per-key
}
