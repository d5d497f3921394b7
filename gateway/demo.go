package gateway

import (
	"encoding/json"
	"net/http"
	"time"
)

// DemoHandler is the small API that upstream "builtin:demo" serves, so that
// the quickstart runs with nothing else: every path answers 200 with a JSON
// echo of the request, and /healthz answers "ok".
func DemoHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"upstream": "ratekeeper demo",
			"method":   r.Method,
			"path":     r.URL.Path,
			"user":     r.Header.Get("X-User-ID"),
			"time":     time.Now().UTC().Format(time.RFC3339Nano),
		})
	})
	return mux
}
