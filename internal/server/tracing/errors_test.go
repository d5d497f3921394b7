package tracing

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
)

// OpenTelemetry's errors reach the process's logger, one line per
// interval whatever a client sends.
func TestLogErrorsTo(t *testing.T) {
	var buf bytes.Buffer
	LogErrorsTo(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { LogErrorsTo(slog.New(slog.DiscardHandler)) })
	for range 100 {
		otel.Handle(errors.New("invalid baggage list-member"))
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "invalid baggage list-member") {
		t.Fatalf("logged %q, want one warning naming the error", buf.String())
	}
}
