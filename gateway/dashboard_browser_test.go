package gateway

import (
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/browsertest"
)

// The dashboard in headless Chromium against a running gateway: the rules
// fill in, the heavy client is listed first, and a failed reload shows up.
// DASHBOARD_SCREENSHOT=path writes the page as docs/operating.md shows it.
func TestDashboardInABrowser(t *testing.T) {
	g := adminGateway(t, "")
	admin := httptest.NewServer(g.adminHandler())
	defer admin.Close()
	for ip, n := range map[string]int{"192.0.2.1": 40, "192.0.2.2": 4, "192.0.2.3": 3} {
		for range n {
			clientGet(g, ip, "/v1/x")
		}
	}
	// One client keeps hitting its limit while the page reads the rates.
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
				clientGet(g, "192.0.2.1", "/v1/x")
			}
		}
	}()
	b := browsertest.Start(t)
	b.Resize(1200, 900)
	b.Navigate(admin.URL + "/ui/")
	const wait = 15 * time.Second
	b.WaitText(wait, "#rules tbody tr td", "per-ip")
	b.WaitText(wait, "#store-url", "memory")
	b.Wait(wait, func() (bool, string) { // two reads: a rate
		var cells []string
		b.Execute(&cells, `const r = document.querySelector('#rules tbody tr'); return r ? [...r.cells].map(c => c.textContent) : [];`)
		return len(cells) > 4 && cells[4] != "–" && cells[4] != "0.0", "per-ip " + strings.Join(cells, " ")
	})
	b.WaitText(wait, "#reload-result", "ok")
	b.Wait(wait, func() (bool, string) {
		var first []string
		b.Execute(&first, `const r = document.querySelector('#top tbody tr'); return r ? [...r.cells].map(c => c.textContent) : [];`)
		return len(first) > 1 && first[0] == "192.0.2.1", "first row " + strings.Join(first, " ")
	})
	if path := os.Getenv("DASHBOARD_SCREENSHOT"); path != "" {
		if err := os.WriteFile(path, b.Screenshot(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(g.path, []byte("rules: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	b.Wait(wait, func() (bool, string) {
		got, _ := b.Text("#reload-result")
		return got != "ok" && got != "", "reload result " + got
	})
}
