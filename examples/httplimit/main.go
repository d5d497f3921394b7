// Command httplimit shows the net/http middleware in an ordinary Go
// service, without the gateway: one limit keyed by API key on one route,
// and a rules file's limits around the whole mux.
//
//	go run ./examples/httplimit
//	curl -i -H 'X-API-Key: k1' localhost:8081/v1/search     # 3 per 10s per key
//	curl -i localhost:8081/v1/hello                           # 5 per 10s per IP
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/rules"
)

// rulesYAML could as well be a file read with rules.LoadFile.
const rulesYAML = `
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: token_bucket, rate: 5, period: 10s}
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httplimit example:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// One store for every limit in the process.
	store := memstore.New()
	defer store.Close()

	// 1. One limit and a key function, around one handler.
	search, err := httplimit.NewLimit(store, "search-per-key",
		ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 3, Period: 10 * time.Second},
		httplimit.KeyByHeader("X-API-Key"), // requests without the header are not limited by it
		httplimit.WithLogger(logger))
	if err != nil {
		return err
	}

	// 2. A rules set (here from a string) around the whole mux.
	cfg, err := rules.Parse("inline.yaml", []byte(rulesYAML))
	if err != nil {
		return err
	}
	set, err := rules.Compile(cfg)
	if err != nil {
		return err
	}
	all, err := httplimit.New(store, set, httplimit.WithLogger(logger))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /v1/search", search.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "results for", r.URL.Query().Get("q"))
	})))
	mux.HandleFunc("GET /v1/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})

	srv := &http.Server{Addr: "127.0.0.1:8081", Handler: all.Handler(mux), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	logger.Info("listening", "addr", srv.Addr)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}
