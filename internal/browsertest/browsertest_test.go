package browsertest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/browsertest"
)

// TestBrowser drives a page that changes after it loads: navigate, wait
// for the text, run a script, take a screenshot.
func TestBrowser(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>t</title><p id="p">loading</p>
<script>setTimeout(() => { document.getElementById('p').textContent = 'ready ' + (6*7); }, 200);</script>`)
	}))
	defer srv.Close()

	b := browsertest.Start(t)
	b.Navigate(srv.URL)
	if got := b.WaitText(10*time.Second, "#p", "ready"); got != "ready 42" {
		t.Errorf("#p shows %q, want %q", got, "ready 42")
	}
	if _, ok := b.Text("#absent"); ok {
		t.Error("Text found #absent")
	}
	var sum int
	b.Execute(&sum, "return arguments[0] + arguments[1];", 40, 2)
	if sum != 42 {
		t.Errorf("the script returned %d, want 42", sum)
	}
	if png := b.Screenshot(); !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("the screenshot is not a PNG: % x", png[:min(8, len(png))])
	}
}
