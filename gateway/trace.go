package gateway

import (
	"context"
	"net/http"

	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing"
)

// traced wraps next in a span per request, a child of the trace context
// the request carries; the rewrite passes it on to the upstream.
func (g *Gateway) traced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := g.tracing.Server(r.Context(), r.Method, r.Header)
		defer span.End()
		span.Str("http.request.method", r.Method)
		span.Str("url.path", r.URL.Path)
		span.Str("client.address", g.mw.Rules().ClientIP().Addr(r).String())
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		span.Int("http.response.status_code", status)
	})
}

// traceDecision is the middleware's WithTrace hook: a span around each
// decision, with the rules matched, the result, the store's mode and the
// refusing rule's key as the admin shows it.
func (g *Gateway) traceDecision(ctx context.Context) (context.Context, func(httplimit.Decided)) {
	ctx, span := g.tracing.Internal(ctx, "ratekeeper.decide")
	return ctx, func(d httplimit.Decided) { endDecision(span, d, g.cfg.Load().Store.Mode) }
}

func endDecision(span tracing.Span, d httplimit.Decided, storeMode string) {
	defer span.End()
	if !span.Recording() {
		return
	}
	span.Int("ratekeeper.rules", len(d.Rules))
	if storeMode == "" {
		storeMode = "memory"
	}
	span.Str("ratekeeper.store_mode", storeMode)
	if d.RefusedBy == "" {
		span.Str("ratekeeper.result", "allowed")
		return
	}
	span.Str("ratekeeper.result", "refused")
	span.Str("ratekeeper.refused_by", d.RefusedBy)
	if rl := d.Refused.Rule; rl != nil {
		span.Str("ratekeeper.key", rl.DisplayKey(d.Refused.Key))
	}
}
