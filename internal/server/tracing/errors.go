package tracing

import (
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
)

// errorLogInterval is how often, at most, OpenTelemetry's errors are
// logged: a client's bad baggage header is one per request.
const errorLogInterval = 10 * time.Second

// LogErrorsTo sends OpenTelemetry's own errors (an export that failed, a
// header it could not parse) to logger at warn level, at most a line per
// 10 s with the count not logged. OpenTelemetry has one error handler per
// process, so this is for a program's main to call once, before tracing
// starts; a library leaves it alone.
func LogErrorsTo(logger *slog.Logger) { otel.SetErrorHandler(newErrorLog(logger)) }

type errorLog struct {
	logger     *slog.Logger
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func newErrorLog(logger *slog.Logger) *errorLog { return &errorLog{logger: logger} }

// Handle logs err unless a line was logged within the interval.
func (l *errorLog) Handle(err error) {
	l.mu.Lock()
	now := time.Now()
	log := l.last.IsZero() || now.Sub(l.last) >= errorLogInterval
	n := l.suppressed
	if log {
		l.last, l.suppressed = now, 0
	} else {
		l.suppressed++
	}
	l.mu.Unlock()
	if log {
		l.logger.Warn("opentelemetry", "err", err, "not_logged_since_last", n)
	}
}
