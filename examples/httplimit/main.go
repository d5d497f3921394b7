// Command httplimit shows the net/http middleware in an ordinary Go
// service, without the gateway: one limit keyed by API key on one route,
// and a rules file's limits around the whole mux.
//
// The rules file's per-ip limit covers every route, /v1/search included.
// So it is larger than the search limit it wraps. Four searches (the fourth
// refused by search-per-key) leave room for the requests after them.
//
//	go run ./examples/httplimit
//	for i in $(seq 4); do curl -s -o /dev/null -w '%{http_code}\n' -H 'X-API-Key: k1' localhost:8090/v1/search; done   # 200 200 200 429: 3 per 10s per key
//	curl -i localhost:8090/v1/hello                           # 200: 10 per 10s per IP, every route
//
// It listens on 127.0.0.1:8090, which nothing of ratekeeper's takes by
// default (the gateway and serve's JSON API take 8080, serve's gRPC 8081,
// the admin listeners 9090).
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
    limit: {algorithm: token_bucket, rate: 10, period: 10s}
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
	h, err := handler(store, logger)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: "127.0.0.1:8090", Handler: h, ReadHeaderTimeout: 10 * time.Second}
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

// handler is the service: its mux inside the rules file's limits.
func handler(store ratekeeper.Store, logger *slog.Logger) (http.Handler, error) {
	// 1. One limit and a key function, around one handler.
	search, err := httplimit.NewLimit(store, "search-per-key",
		ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 3, Period: 10 * time.Second},
		httplimit.KeyByHeader("X-API-Key"), // requests without the header are not limited by it
		httplimit.WithLogger(logger))
	if err != nil {
		return nil, err
	}

	// 2. A rules set (here from a string) around the whole mux.
	cfg, err := rules.Parse("inline.yaml", []byte(rulesYAML))
	if err != nil {
		return nil, err
	}
	set, err := rules.Compile(cfg)
	if err != nil {
		return nil, err
	}
	all, err := httplimit.New(store, set, httplimit.WithLogger(logger))
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /v1/search", search.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "results for", r.URL.Query().Get("q"))
	})))
	mux.HandleFunc("GET /v1/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})

	return all.Handler(mux), nil
}
