package sim

import (
	"strings"
	"testing"
	"time"
)

func TestRunConcurrency(t *testing.T) {
	// Under the limit (Little: 5 in flight of 10) nothing is refused.
	r, err := RunConcurrency(ConcurrencyConfig{Max: 10, Rate: 50, Hold: 100 * time.Millisecond, Span: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Refused != 0 || r.Admitted != 500 || r.Peak != 5 {
		t.Fatalf("under the limit: admitted %d refused %d peak %d", r.Admitted, r.Refused, r.Peak)
	}
	// Twice the limit: in flight stays at Max and about half is refused.
	r, err = RunConcurrency(ConcurrencyConfig{Max: 10, Rate: 200, Hold: 100 * time.Millisecond, Span: 10 * time.Second, Jitter: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Peak != 10 {
		t.Fatalf("peak %d, max 10", r.Peak)
	}
	for _, s := range r.Samples {
		if s.Peak > 10 {
			t.Fatalf("sample %v: %d in flight", s.At, s.Peak)
		}
	}
	if share := float64(r.Refused) / 2000; share < 0.4 || share > 0.75 {
		t.Fatalf("refused %d of 2000 at twice the limit", r.Refused)
	}
	var b strings.Builder
	r.WriteText(&b)
	if !strings.Contains(b.String(), "peak in flight 10") || !strings.Contains(b.String(), "|") {
		t.Fatalf("text:\n%s", b.String())
	}
}
