// Command gubernator runs one gubernator node (github.com/gubernator-io/gubernator,
// built from its Go module). It lets bench/run-rls.sh load gubernator side
// by side with ratekeeper serve and Envoy's reference service. It is a
// single node without peers: discovery is off and the node owns every key.
// So each decision is made in its own memory, where gubernator keeps its
// counts (it has no shared store). The node runs with its default cache and
// worker settings.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

func main() {
	grpcAddr := flag.String("grpc-listen", "127.0.0.1:9081", "gRPC `address` (GetRateLimits)")
	httpAddr := flag.String("http-listen", "127.0.0.1:9080", "HTTP `address` (its JSON gateway and health check)")
	flag.Parse()
	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	d, err := gubernator.SpawnDaemon(context.Background(), gubernator.DaemonConfig{
		GRPCListenAddress: *grpcAddr,
		HTTPListenAddress: *httpAddr,
		PeerDiscoveryType: "none",
		Logger:            logrus.NewEntry(logger),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gubernator:", err)
		os.Exit(1)
	}
	d.SetPeers([]gubernator.PeerInfo{{GRPCAddress: *grpcAddr, HTTPAddress: *httpAddr, IsOwner: true}})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	d.Close()
}
