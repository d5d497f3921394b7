// Package browsertest drives a headless Chromium for tests, through
// chromedriver and the W3C WebDriver protocol over plain HTTP.
//
// Start needs /usr/bin/chromedriver (Debian's chromium-driver, which
// scripts/test-deps.sh installs). Without it the test is skipped, or
// fails when the environment has CI=true: CI must run every test.
// Each Browser has its own chromedriver on a free loopback port and its
// own profile directory; both are gone when the test ends.
package browsertest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Driver is the chromedriver that Start runs.
const Driver = "/usr/bin/chromedriver"

// Timeouts.
const (
	// StartTimeout bounds chromedriver's start and the browser's.
	StartTimeout = 30 * time.Second
	// CommandTimeout bounds one WebDriver command.
	CommandTimeout = 30 * time.Second
	// pollEvery is how often Wait asks again.
	pollEvery = 50 * time.Millisecond
)

// Browser is one WebDriver session in a headless Chromium. Its methods
// fail the test on any WebDriver error. It is not safe for concurrent use.
type Browser struct {
	t       testing.TB
	base    string // chromedriver's URL
	session string // the session's path: base + "/session/" + id
	client  *http.Client
}

// Start runs chromedriver and opens a session in a new headless Chromium,
// both stopped when t ends. It skips t when chromedriver is missing (fails
// it under CI=true).
func Start(t testing.TB) *Browser {
	t.Helper()
	if _, err := os.Stat(Driver); err != nil {
		msg := Driver + " is missing (Debian package chromium-driver; scripts/test-deps.sh installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " — and CI=true requires it")
		}
		t.Skip(msg)
	}
	profile := t.TempDir() // first, so that it is removed after the browser stops
	b := &Browser{t: t, client: &http.Client{Timeout: CommandTimeout}}
	b.base = startDriver(t)
	b.newSession(profile)
	return b
}

// startDriver runs chromedriver on a free loopback port until t ends and
// returns its URL once it is ready.
func startDriver(t testing.TB) string {
	t.Helper()
	port := freePort(t)
	var log syncBuffer
	cmd := exec.Command(Driver, "--port="+strconv.Itoa(port), "--allowed-ips=", "--log-level=WARNING")
	cmd.Stdout, cmd.Stderr = &log, &log
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		killGroup(cmd)
		<-exited
	})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(StartTimeout)
	for {
		select {
		case <-exited:
			t.Fatalf("browsertest: chromedriver exited: %s", log.String())
		default:
		}
		if ready(base) {
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("browsertest: chromedriver not ready after %v: %s", StartTimeout, log.String())
		}
		time.Sleep(pollEvery)
	}
}

// ready reports whether the driver at base answers /status as ready.
func ready(base string) bool {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get(base + "/status")
	if err != nil {
		return false
	}
	defer res.Body.Close()
	var st struct {
		Value struct {
			Ready bool `json:"ready"`
		} `json:"value"`
	}
	return json.NewDecoder(res.Body).Decode(&st) == nil && st.Value.Ready
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Args are the command-line arguments Chromium gets, but the profile
// directory: headless, and quiet on the network but for what the test
// asks.
var Args = []string{
	"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-dev-shm-usage", "--window-size=1280,900",
}

// newSession opens a session in a Chromium with its profile in dir.
func (b *Browser) newSession(dir string) {
	b.t.Helper()
	opts := map[string]any{"args": append(Args[:len(Args):len(Args)], "--user-data-dir="+dir)}
	if bin, err := exec.LookPath("chromium"); err == nil {
		opts["binary"] = bin
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome", "goog:chromeOptions": opts,
	}}}
	var got struct {
		SessionID string `json:"sessionId"`
	}
	b.call(http.MethodPost, b.base+"/session", caps, &got)
	b.session = b.base + "/session/" + got.SessionID
	b.t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, b.session, nil)
		if res, err := b.client.Do(req); err == nil {
			res.Body.Close()
		}
	})
}

// call sends one WebDriver command and decodes its "value" into out (nil:
// ignored). A WebDriver error fails the test.
func (b *Browser) call(method, url string, in, out any) {
	b.t.Helper()
	if err := b.do(method, url, in, out); err != nil {
		b.t.Fatalf("browsertest: %s %s: %v", method, strings.TrimPrefix(url, b.base), err)
	}
}

// Error is a WebDriver error answer.
type Error struct {
	Code    string `json:"error"` // such as "no such element"
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// do sends one WebDriver command; a WebDriver error is an *Error.
func (b *Browser) do(method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		js, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	res, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(res.Body).Decode(&env); err != nil {
		return fmt.Errorf("%s: %w", res.Status, err)
	}
	if res.StatusCode != http.StatusOK {
		var we Error
		if err := json.Unmarshal(env.Value, &we); err != nil || we.Code == "" {
			return fmt.Errorf("%s: %s", res.Status, env.Value)
		}
		return &we
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(env.Value, out)
}

// Navigate loads url and waits for its document to load.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	b.call(http.MethodPost, b.session+"/url", map[string]string{"url": url}, nil)
}

// Execute runs script as a function body with args (arguments[0]...) and
// decodes what it returns into out (nil: ignored).
func (b *Browser) Execute(out any, script string, args ...any) {
	b.t.Helper()
	if args == nil {
		args = []any{}
	}
	b.call(http.MethodPost, b.session+"/execute/sync", map[string]any{"script": script, "args": args}, out)
}

// Text returns the rendered text of the first element that the CSS
// selector matches, and false when none does.
func (b *Browser) Text(selector string) (string, bool) {
	b.t.Helper()
	var elem map[string]string
	err := b.do(http.MethodPost, b.session+"/element", map[string]string{"using": "css selector", "value": selector}, &elem)
	if we := (*Error)(nil); errors.As(err, &we) && we.Code == "no such element" {
		return "", false
	}
	if err != nil {
		b.t.Fatalf("browsertest: find %q: %v", selector, err)
	}
	var id string
	for _, v := range elem { // one entry, under the W3C element key
		id = v
	}
	var text string
	err = b.do(http.MethodGet, b.session+"/element/"+id+"/text", nil, &text)
	if we := (*Error)(nil); errors.As(err, &we) && we.Code == "stale element reference" {
		return "", false // replaced since it was found: the caller asks again
	}
	if err != nil {
		b.t.Fatalf("browsertest: text of %q: %v", selector, err)
	}
	return text, true
}

// WaitText waits until the first element the selector matches shows a
// text containing want, and returns that text.
func (b *Browser) WaitText(timeout time.Duration, selector, want string) string {
	b.t.Helper()
	var last string
	b.Wait(timeout, func() (bool, string) {
		text, ok := b.Text(selector)
		last = text
		if !ok {
			return false, fmt.Sprintf("no element matches %q", selector)
		}
		return strings.Contains(text, want), fmt.Sprintf("%q shows %q, not %q", selector, text, want)
	})
	return last
}

// Wait asks cond until it reports true, and fails the test with cond's
// last description when timeout passes first.
func (b *Browser) Wait(timeout time.Duration, cond func() (ok bool, why string)) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("browsertest: after %v: %s", timeout, why)
		}
		time.Sleep(pollEvery)
	}
}

// Resize sets the browser window's size in CSS pixels.
func (b *Browser) Resize(width, height int) {
	b.t.Helper()
	b.call(http.MethodPost, b.session+"/window/rect", map[string]int{"width": width, "height": height}, nil)
}

// Screenshot returns a PNG of the browser's viewport.
func (b *Browser) Screenshot() []byte {
	b.t.Helper()
	var enc string
	b.call(http.MethodGet, b.session+"/screenshot", nil, &enc)
	png, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		b.t.Fatalf("browsertest: screenshot: %v", err)
	}
	return png
}

// syncBuffer collects chromedriver's output for failure messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
