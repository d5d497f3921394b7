package serverstore

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/server"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// TestDocumentedStoreMetrics scrapes /metrics of a process whose store is
// Redis (opened as ratekeeper proxy and ratekeeper serve open it; that
// Redis is not running does not matter: the process starts anyway), and
// holds docs/redis.md to it: every metric it names is exposed, and every
// ratekeeper_store_* metric exposed is named there. Every store metric the
// other docs name is exposed too. So the docs cannot list a metric that
// does not exist, nor miss one that does.
func TestDocumentedStoreMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := server.New(path, nil)
	t.Cleanup(func() { p.Close() })
	if _, err := p.OpenStore(context.Background(), Opener(storeconfig.Config{URL: "redis://127.0.0.1:1/0"})); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	metrics.AdminHandler(p.Registry, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	exposed := map[string]bool{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			exposed[f[2]] = true
		}
	}
	name := regexp.MustCompile(`ratekeeper_[a-z0-9_]*[a-z0-9]`)
	docs, _ := filepath.Glob("../../../docs/*.md")
	docs = append(docs, "../../../README.md")
	var inRedis []string
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(b), -1) {
			isRedis := filepath.Base(doc) == "redis.md"
			if isRedis {
				inRedis = append(inRedis, n)
			}
			if (isRedis || strings.HasPrefix(n, "ratekeeper_store_")) && !exposed[n] {
				t.Errorf("%s names %s, which /metrics does not expose", doc, n)
			}
		}
	}
	var store []string
	for n := range exposed {
		if strings.HasPrefix(n, "ratekeeper_store_") {
			store = append(store, n)
			if !slices.Contains(inRedis, n) {
				t.Errorf("/metrics exposes %s, which docs/redis.md does not name", n)
			}
		}
	}
	if len(store) < 14 {
		t.Errorf("only %d store metrics exposed: %v", len(store), store)
	}
}
