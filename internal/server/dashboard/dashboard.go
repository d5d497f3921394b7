package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

//go:embed assets/index.html assets/app.js assets/app.css
var assets embed.FS

// contentSecurityPolicy lets the page load and fetch from its own origin
// only, and run no inline script or style.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page and, for the functions given to New, its JSON.
// It is safe for concurrent use.
type Handler struct {
	status    func(context.Context) (Status, error)
	top       func(context.Context, TopQuery) (TopAnswer, error)
	authorize func(http.ResponseWriter, *http.Request) bool
	mux       *http.ServeMux
}

// An Option configures a Handler.
type Option interface {
	apply(*Handler)
}

type optionFunc func(*Handler)

func (f optionFunc) apply(h *Handler) { f(h) }

// WithAuthorize guards the JSON endpoints: authorize reports whether r may
// read, and answers r itself (401) when not. Without it the JSON is open;
// the page's assets are always public.
func WithAuthorize(authorize func(w http.ResponseWriter, r *http.Request) bool) Option {
	return optionFunc(func(h *Handler) { h.authorize = authorize })
}

// New returns a Handler for the paths UIPath (and what is under it),
// StatusPath and TopPath. A nil status or top leaves its path unserved
// (404): the gateway may serve it itself.
func New(status func(context.Context) (Status, error), top func(context.Context, TopQuery) (TopAnswer, error), opts ...Option) *Handler {
	h := &Handler{status: status, top: top, mux: http.NewServeMux()}
	for _, o := range opts {
		o.apply(h)
	}
	h.mux.Handle("GET /ui", http.RedirectHandler(UIPath, http.StatusMovedPermanently))
	h.mux.Handle("GET "+UIPath+"{$}", asset("assets/index.html", "text/html; charset=utf-8"))
	h.mux.Handle("GET "+UIPath+"app.js", asset("assets/app.js", "text/javascript; charset=utf-8"))
	h.mux.Handle("GET "+UIPath+"app.css", asset("assets/app.css", "text/css; charset=utf-8"))
	if status != nil {
		h.mux.HandleFunc("GET "+StatusPath, h.guard(h.serveStatus))
	}
	if top != nil {
		h.mux.HandleFunc("GET "+TopPath, h.guard(h.serveTop))
	}
	return h
}

// ServeHTTP serves r.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// guard runs next when the request is authorized.
func (h *Handler) guard(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.authorize != nil && !h.authorize(w, r) {
			return
		}
		next(w, r)
	}
}

// asset serves one embedded file with an ETag, so a browser revalidates
// instead of fetching it again.
func asset(name, contentType string) http.Handler {
	body, err := assets.ReadFile(name)
	if err != nil {
		panic(err) // the embed directive names the files: a miss is a build error
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:8]) + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Type", contentType)
		hdr.Set("Content-Security-Policy", contentSecurityPolicy)
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("Referrer-Policy", "no-referrer")
		hdr.Set("Cache-Control", "no-cache")
		hdr.Set("ETag", etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	})
}

func (h *Handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	st, err := h.status(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) serveTop(w http.ResponseWriter, r *http.Request) {
	q, err := ParseTopQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ans, err := h.top(r.Context(), q)
	switch {
	case errors.Is(err, ErrUnknownRule):
		writeError(w, http.StatusNotFound, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, ans)
	}
}

// ParseTopQuery reads a TopQuery from r's query parameters rule, n, span
// and scope, with the defaults filled in. A value out of bounds is an
// error.
func ParseTopQuery(r *http.Request) (TopQuery, error) {
	v := r.URL.Query()
	q := TopQuery{Rule: v.Get("rule"), N: DefaultN, Span: SpanMinute, Scope: ScopeLocal}
	if s := v.Get("n"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxN {
			return q, fmt.Errorf("n: %q is not a whole number from 1 to %d", s, MaxN)
		}
		q.N = n
	}
	switch s := v.Get("span"); s {
	case "":
	case SpanMinute, SpanHour:
		q.Span = s
	default:
		return q, fmt.Errorf("span: %q is not %s or %s", s, SpanMinute, SpanHour)
	}
	switch s := v.Get("scope"); s {
	case "":
	case ScopeLocal, ScopeFleet:
		q.Scope = s
	default:
		return q, fmt.Errorf("scope: %q is not %s or %s", s, ScopeLocal, ScopeFleet)
	}
	return q, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

// writeError answers {"error": msg}, as the admin token's guard does.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{msg})
}
