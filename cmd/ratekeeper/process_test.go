package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain removes the binary that binary built, once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// binary builds ratekeeper (with the race detector) once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ratekeeper-e2e")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "ratekeeper")
		out, err := exec.Command("go", "build", "-race", "-buildvcs=auto", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// process is a ratekeeper command running as its own process. It logs JSON
// to stderr; the lines are kept for assertions and printed when the test
// fails.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// startProcess runs the binary with args (which must ask for JSON logs) and
// waits until it logs the message ready; it returns the fields of that log
// line. The process is killed when the test ends.
func startProcess(t *testing.T, ready string, args ...string) (*process, map[string]any) {
	t.Helper()
	p := &process{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(binary(t), args...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fields := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.logs.Write(line)
			p.logs.WriteByte('\n')
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal(line, &m) == nil && m["msg"] == ready {
				select {
				case fields <- m:
				default:
				}
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s logs:\n%s", args[0], p.Logs())
		}
	})
	select {
	case m := <-fields:
		return p, m
	case <-p.done:
		t.Fatalf("%s exited before logging %q: %v\n%s", args[0], ready, p.err, p.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not log %q within 60s\n%s", args[0], ready, p.Logs())
	}
	return nil, nil
}

// Logs returns what the process has logged so far.
func (p *process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}
