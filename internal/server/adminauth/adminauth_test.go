package adminauth

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	spaced := filepath.Join(dir, "spaced")
	os.WriteFile(spaced, []byte("0123456789 abcdef0123\n"), 0o600)
	t.Setenv("RK_TEST_TOKEN", "fedcba9876543210fedcba")
	if tok, err := Load(good, ""); err != nil || tok != "0123456789abcdef0123" {
		t.Fatalf("file: %q, %v", tok, err)
	}
	if tok, err := Load("", "RK_TEST_TOKEN"); err != nil || tok != "fedcba9876543210fedcba" {
		t.Fatalf("env: %q, %v", tok, err)
	}
	for name, f := range map[string]func() (string, error){
		"short":   func() (string, error) { return Load(short, "") },
		"spaced":  func() (string, error) { return Load(spaced, "") },
		"twice":   func() (string, error) { return Load(good, "RK_TEST_TOKEN") },
		"none":    func() (string, error) { return Load("", "") },
		"unset":   func() (string, error) { return Load("", "RK_TEST_NOT_SET") },
		"missing": func() (string, error) { return Load(filepath.Join(dir, "nope"), "") },
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestGuard(t *testing.T) {
	var logs bytes.Buffer
	refused := 0
	g := New(slog.New(slog.NewTextHandler(&logs, nil)), func() { refused++ })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.Authorize(w, r, "0123456789abcdef0123") {
			w.WriteHeader(http.StatusNoContent)
		}
	})
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"", 401},
		{"Bearer", 401},
		{"Bearer ", 401},
		{"Basic 0123456789abcdef0123", 401},
		{"Bearer 0123456789abcdef012", 401},
		{"Bearer 0123456789abcdef01234", 401},
		{"Bearer 0123456789abcdef0123", 204},
		{"bearer 0123456789abcdef0123", 204},
	} {
		r := httptest.NewRequest("POST", "/x", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%q: %d, want %d", tc.auth, w.Code, tc.want)
		}
	}
	if refused != 6 {
		t.Fatalf("refused counted %d, want 6", refused)
	}
	if Allowed(httptest.NewRequest("GET", "/", nil), "") {
		t.Fatal("an empty token allowed a request without one")
	}
	if n := strings.Count(logs.String(), "admin request refused"); n != 1 {
		t.Fatalf("logged %d times, want once (rate-limited):\n%s", n, logs.String())
	}
}
