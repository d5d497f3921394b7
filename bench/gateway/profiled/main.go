// Command profiled is `ratekeeper proxy --config FILE` with Go's profiler
// on a second listener (net/http/pprof's /debug/pprof/), and the runtime's
// counters at /debug/counters. It is how bench/run-h2-profile.sh reads the
// CPU profile and the allocations of the gateway alone, apart from the
// load generator and the upstream.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/metrics"
	"syscall"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway"
)

func main() {
	config := flag.String("config", "", "the gateway's config `file`")
	addr := flag.String("pprof", "127.0.0.1:6060", "the profiler's listen `address`")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g, err := gateway.New(ctx, *config, gateway.Options{})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/counters", counters)
	go func() {
		srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		log.Fatal(srv.ListenAndServe())
	}()
	if err := g.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// counters writes the runtime's cumulative counts, one "name value" a line:
// heap allocations (tiny ones included), bytes allocated, goroutines
// created and GC cycles.
func counters(w http.ResponseWriter, _ *http.Request) {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"},
		{Name: "/gc/heap/tiny/allocs:objects"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/sched/goroutines-created:goroutines"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	fmt.Fprintf(w, "allocs %d\nbytes %d\ngoroutines %d\ngc %d\n",
		s[0].Value.Uint64()+s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Uint64(), s[4].Value.Uint64())
}
