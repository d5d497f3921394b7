package gateway

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/httplimit"
)

// The access_log values.
const (
	AccessLogOff     = "off"
	AccessLogAll     = "all"
	AccessLogRefused = "refused"
)

// accessLog writes a JSON line per request (or per refused request) with
// what the limits decided. Refusals are otherwise counted by the metrics,
// never logged per request: under a flood of refused clients, the line per
// refusal is the cost the operator asked for.
type accessLog struct {
	logger      *slog.Logger
	refusedOnly bool
}

// newAccessLog writes to logger in mode, or returns nil for "off". Every
// mode of a gateway shares one logger, so that lines written across a
// reload never interleave.
func newAccessLog(mode string, logger *slog.Logger) *accessLog {
	if mode == "" || mode == AccessLogOff {
		return nil
	}
	return &accessLog{logger: logger, refusedOnly: mode == AccessLogRefused}
}

// logged wraps next, the view and everything after it, in the access log
// the gateway's file asks for at the time of each request.
func (g *Gateway) logged(next http.Handler) http.Handler {
	clientIP := func(r *http.Request) string { return g.mw.Rules().ClientIP().Addr(r).String() }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := g.access.Load(); a != nil {
			a.serve(next, w, r, clientIP)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// record is one request's line, filled as it goes.
type record struct {
	decided   bool
	rules     []string
	refusedBy string
	over      []string // the rules whose over_limit let the request go on past them
	key       string   // the refusing rule's key as the admin shows it, else the first over rule's
}

type recordKey struct{}

// logDecision copies the decision into the request's record, if the access
// log gave it one.
func logDecision(r *http.Request, d httplimit.Decided) {
	if rec, ok := r.Context().Value(recordKey{}).(*record); ok {
		rec.decided = true
		rec.rules = append(rec.rules[:0], d.Rules...)
		rec.refusedBy = d.RefusedBy
		rec.over = rec.over[:0]
		for _, m := range d.Over {
			rec.over = append(rec.over, m.Rule.Name)
		}
		if rl := d.Refused.Rule; rl != nil {
			rec.key = rl.DisplayKey(d.Refused.Key)
		} else if len(d.Over) > 0 {
			rec.key = d.Over[0].Rule.DisplayKey(d.Over[0].Key)
		}
	}
}

// serve serves r with next and logs it.
func (a *accessLog) serve(next http.Handler, w http.ResponseWriter, r *http.Request, clientIP func(*http.Request) string) {
	start := time.Now()
	rec := &record{}
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), recordKey{}, rec)))
	status := sw.status
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	if a.refusedOnly && rec.refusedBy == "" && len(rec.over) == 0 {
		return
	}
	rules, over := rec.rules, rec.over
	if rules == nil {
		rules = []string{}
	}
	if over == nil {
		over = []string{}
	}
	a.logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("client", clientIP(r)),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Any("rules", rules),
		slog.String("refused_by", rec.refusedBy),
		slog.Any("over_limit", over),
		slog.String("key", rec.key),
		slog.Float64("duration", time.Since(start).Seconds()),
	)
}

// statusWriter remembers the status written through it. Unwrap lets
// http.ResponseController (ReverseProxy's flushes, upgrades) reach the
// connection's writer; Flush and Hijack serve those who assert them.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}
