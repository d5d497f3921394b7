package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// needTool finds a command-line tool the test runs, or skips the test
// (fails it under CI=true, where make test installs it).
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed, and CI=true requires it (make test-deps)", name)
		}
		t.Skipf("%s is not installed", name)
	}
}

// readmeBlocks returns the shell lines of the code blocks in README's
// section titled title.
func readmeBlocks(t *testing.T, title string) [][]string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README has no section %q", title)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks [][]string
	for i, part := range strings.Split(section, "```") {
		if i%2 == 1 {
			lines := strings.Split(strings.TrimPrefix(part, "sh\n"), "\n")
			blocks = append(blocks, lines[:len(lines)-1])
		}
	}
	return blocks
}

// TestE2EReadmeHTTPS runs README's HTTPS section as written: openssl
// makes the certificate, the proxy serves examples/https.yaml, and curl
// gets 200 over HTTP/2 and then HTTP/1.1.
func TestE2EReadmeHTTPS(t *testing.T) {
	needTool(t, "openssl")
	needTool(t, "curl")
	blocks := readmeBlocks(t, "HTTPS")
	if len(blocks) != 2 || len(blocks[0]) != 2 || len(blocks[1]) != 2 {
		t.Fatalf("README's HTTPS section: %q", blocks)
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "examples"), 0o755)
	yaml, err := os.ReadFile("../../examples/https.yaml")
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "examples", "https.yaml")
	os.WriteFile(config, yaml, 0o644)
	sh := func(line string) string {
		t.Helper()
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		return string(out)
	}
	sh(blocks[0][0]) // openssl
	if want := "go run ./cmd/ratekeeper proxy --config examples/https.yaml"; blocks[0][1] != want {
		t.Fatalf("README runs %q, the test %q", blocks[0][1], want)
	}
	p := startProxyFile(t, config)
	_, port, _ := net.SplitHostPort(p.addr)
	for i, want := range []string{"2 200\n", "1.1 200\n"} {
		line := strings.ReplaceAll(blocks[1][i], "localhost:8443", "localhost:"+port)
		if got := sh(line); got != want {
			t.Errorf("%s: %q, want %q", blocks[1][i], got, want)
		}
	}
}
