package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lockedBuffer is a buffer the gateway writes and the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("an access log line is not JSON: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestAccessLog: access_log: all writes a JSON line per request with the
// client, method, path without its query, status, the rules that matched,
// the one that refused and the duration in seconds; refused writes only
// the refusals; off (the default) writes nothing; and while it is on the
// fast path hands every connection to net/http, so that no request goes
// unlogged.
func TestAccessLog(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	for _, tc := range []struct {
		mode     string
		statuses []float64
	}{
		{"all", []float64{200, 429, 200}},
		{"refused", []float64{429}},
		{"off", nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gw.yaml")
			yaml := "listen: 127.0.0.1:0\nwatch: -1s\naccess_log: " + tc.mode + "\nupstream: " + up.URL + "\nrules:\n" +
				"  - name: api\n    match: {path_prefix: /api/}\n    key: [ip]\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n" +
				"  - name: watch\n    mode: shadow\n    match: {path_prefix: /api/}\n    limit: {algorithm: fixed_window, rate: 100, period: 1h}\n"
			if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			var buf lockedBuffer
			g, err := New(context.Background(), path, Options{AccessLog: &buf})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- g.Run(ctx) }()
			defer func() {
				cancel()
				<-done
			}()
			deadline := time.Now().Add(5 * time.Second)
			for g.Addr() == nil {
				if time.Now().After(deadline) {
					t.Fatal("the gateway did not start")
				}
				time.Sleep(time.Millisecond) // polling, bounded above
			}
			base := "http://" + g.Addr().String()
			for _, p := range []string{"/api/x?token=secret", "/api/x?token=secret", "/other"} {
				resp, err := http.Get(base + p)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			lines := buf.lines(t)
			if len(lines) != len(tc.statuses) {
				t.Fatalf("%d lines, want %d: %v", len(lines), len(tc.statuses), lines)
			}
			for i, l := range lines {
				if l["status"] != tc.statuses[i] || l["client"] != "127.0.0.1" || l["method"] != "GET" || l["msg"] != "request" {
					t.Errorf("line %d: %v", i, l)
				}
				if d, ok := l["duration"].(float64); !ok || d <= 0 || d > 5 {
					t.Errorf("line %d: duration %v, want seconds", i, l["duration"])
				}
				if strings.Contains(l["path"].(string), "secret") {
					t.Errorf("line %d logs the query: %v", i, l["path"])
				}
				want, refused := `["api","watch"]`, ""
				if l["status"] == 429.0 {
					refused = "api"
				}
				if l["path"] == "/other" {
					want = "[]"
				}
				if got := toJSON(l["rules"]); got != want || l["refused_by"] != refused {
					t.Errorf("line %d: rules %s refused_by %q; want %s and %q", i, got, l["refused_by"], want, refused)
				}
			}
			fast := testutil.ToFloat64(g.metrics.ConnectionCounter("fast"))
			handed := testutil.ToFloat64(g.metrics.ConnectionCounter("net_http"))
			if on := tc.mode != "off"; on && (fast == 0 || handed != fast) || !on && (fast == 0 || handed != 0) {
				t.Errorf("access_log %s: %v connections on the fast path, %v handed to net/http", tc.mode, fast, handed)
			}
		})
	}
}

// A reload that changes access_log applies from the next request, on a
// connection the fast path was serving too; requests served meanwhile
// race with nothing.
func TestAccessLogReload(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	path := filepath.Join(t.TempDir(), "gw.yaml")
	write := func(mode string) {
		t.Helper()
		yaml := "listen: 127.0.0.1:0\nwatch: -1s\naccess_log: " + mode + "\nupstream: " + up.URL + "\nrules:\n" +
			"  - name: api\n    match: {path_prefix: /api/}\n    key: [header:X-Key]\n    limit: {algorithm: fixed_window, rate: 1, period: 1h}\n"
		if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("off")
	var buf lockedBuffer
	g, err := New(context.Background(), path, Options{AccessLog: &buf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(5 * time.Second)
	for g.Addr() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not start")
		}
		time.Sleep(time.Millisecond) // polling, bounded above
	}
	base := "http://" + g.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}} // one keep-alive connection
	defer client.CloseIdleConnections()
	n := 0
	send := func(key string) int { // a new key is admitted, a used one refused
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/api/x", nil)
		req.Header.Set("X-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n++
		return resp.StatusCode
	}
	reload := func(mode string) {
		t.Helper()
		write(mode)
		if err := g.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	statuses := func() []float64 {
		var s []float64
		for _, l := range buf.lines(t) {
			s = append(s, l["status"].(float64))
		}
		return s
	}
	send("a")
	send("a")
	if s := statuses(); len(s) != 0 {
		t.Fatalf("access_log off: lines %v", s)
	}
	reload("all")
	send("b")
	send("b")
	if s := statuses(); toJSON(s) != "[200,429]" {
		t.Fatalf("after the reload to all: statuses %v, want [200,429]", s)
	}
	reload("refused")
	send("c")
	send("c")
	if s := statuses(); toJSON(s) != "[200,429,429]" {
		t.Fatalf("after the reload to refused: statuses %v, want [200,429,429]", s)
	}
	reload("off")
	send("d")
	send("d")
	if s := statuses(); len(s) != 3 {
		t.Fatalf("after the reload to off: statuses %v", s)
	}
	// Requests in flight while the log turns on and off: -race watches.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			c := &http.Client{}
			defer c.CloseIdleConnections()
			for j := range 50 {
				req, _ := http.NewRequest("GET", base+"/api/x", nil)
				req.Header.Set("X-Key", fmt.Sprint(i, j))
				if resp, err := c.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	for _, mode := range []string{"all", "off", "refused", "all"} {
		reload(mode)
	}
	wg.Wait()
	if s := statuses(); len(s) < 3 || len(s) > 3+100 {
		t.Fatalf("%d lines after the concurrent requests", len(s))
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestUpstreamPasswordNotShown: a password in the upstream URL reaches no
// error message and no log line.
func TestUpstreamPasswordNotShown(t *testing.T) {
	for _, up := range []string{"http://user:hunter2@%zz", "ftp://user:hunter2@h", "http://user:hunter2@"} {
		_, err := Parse("f.yaml", []byte("upstream: "+up+"\n"))
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("upstream %s: %v", up, err)
		}
	}
	if got := redactedURL("http://user:hunter2@h:1/p"); strings.Contains(got, "hunter2") {
		t.Errorf("redactedURL: %s", got)
	}
}

// A change to the file turns the access log on without a signal: the
// watcher's reload does what Reload does.
func TestAccessLogReloadByWatch(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	path := filepath.Join(t.TempDir(), "gw.yaml")
	write := func(mode string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nwatch: 20ms\naccess_log: "+mode+"\nupstream: "+up.URL+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("off")
	var buf lockedBuffer
	g, err := New(context.Background(), path, Options{AccessLog: &buf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(10 * time.Second)
	for g.Addr() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not start")
		}
		time.Sleep(time.Millisecond) // polling, bounded above
	}
	get := func() {
		t.Helper()
		resp, err := http.Get("http://" + g.Addr().String() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	get()
	if n := len(buf.lines(t)); n != 0 {
		t.Fatalf("access_log off: %d lines", n)
	}
	write("all")
	for len(buf.lines(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no line 10s after the file turned the access log on")
		}
		get()
		time.Sleep(10 * time.Millisecond) // polling the watcher, bounded above
	}
}
