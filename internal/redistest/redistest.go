// Package redistest starts real redis-server processes for tests: a
// standalone server (Server, Start) and a three-master Redis Cluster
// (Cluster), each on free loopback ports with its own temporary directory,
// stopped when the test ends.
//
// Without redis-server on PATH they skip the test with a loud message, except
// when the environment has CI=true, where they fail it: CI must run every
// Redis test (make test installs redis-server and redis-tools).
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// need finds the binaries or skips (fails under CI=true) the test.
func need(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			msg := fmt.Sprintf("!!! REDIS TEST NOT RUN: %s is not installed (apt-get install redis-server redis-tools, or run make test-deps)", b)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg + " — and CI=true requires it")
			}
			t.Skip(msg)
		}
	}
}

// Instance is one redis-server process. Its methods are safe for
// concurrent use.
type Instance struct {
	t    testing.TB
	dir  string
	port int
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Server starts a standalone redis-server and returns its URL,
// redis://127.0.0.1:PORT/0.
func Server(t testing.TB) string {
	t.Helper()
	return Start(t).URL()
}

// Start starts a standalone redis-server on a free loopback port; the test's
// cleanup stops it. Tests that stop and restart the server (Kill, Restart)
// use Start rather than Server.
func Start(t testing.TB) *Instance {
	t.Helper()
	need(t, "redis-server")
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(false)
		if err != nil {
			last = err
			continue
		}
		in := &Instance{t: t, dir: t.TempDir(), port: port}
		if last = in.start(); last == nil {
			t.Cleanup(in.Kill)
			return in
		}
	}
	t.Fatalf("redistest: cannot start redis-server: %v", last)
	return nil
}

// Addr is the server's host:port.
func (in *Instance) Addr() string { return "127.0.0.1:" + strconv.Itoa(in.port) }

// URL is the server's redis:// URL, database 0.
func (in *Instance) URL() string { return "redis://" + in.Addr() + "/0" }

func (in *Instance) start() error {
	args := append([]string{
		"--port", strconv.Itoa(in.port),
		"--bind", "127.0.0.1",
		"--dir", in.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(in.dir, "redis.log"),
	}, in.args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(in.Addr()) == nil {
			break
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited: %s", in.port, in.log())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer in 10s: %s", in.port, in.log())
		}
		time.Sleep(5 * time.Millisecond) // polling for readiness, bounded above
	}
	in.mu.Lock()
	in.cmd, in.done = cmd, done
	in.mu.Unlock()
	return nil
}

func (in *Instance) log() string {
	b, _ := os.ReadFile(filepath.Join(in.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// Kill stops the server at once (SIGKILL) and waits for it to exit. It is a
// no-op on a stopped server.
func (in *Instance) Kill() {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.cmd = nil
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT) // a paused server must run to die
	cmd.Process.Kill()
	<-done
}

// Pause stops the server's process (SIGSTOP) without closing its
// connections: calls to it hang, as to an overloaded or partitioned server,
// until Resume.
func (in *Instance) Pause() { in.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (in *Instance) Resume() { in.signal(syscall.SIGCONT) }

func (in *Instance) signal(sig os.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil {
		in.cmd.Process.Signal(sig)
	}
}

// Restart starts a killed server again on the same port (empty: nothing is
// persisted).
func (in *Instance) Restart() {
	in.t.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = in.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond) // the port may linger briefly
	}
	in.t.Fatalf("redistest: cannot restart redis-server on port %d: %v", in.port, err)
}

// ping sends PING and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// command sends one inline command and returns the first line of the reply
// and, for a bulk reply, its body.
func command(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(line, "$") {
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return strings.TrimSpace(line), nil
}

// freePort finds a loopback port nothing listens on; for a cluster node,
// port+10000 (its cluster bus) must be free too.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 100; i++ {
		port := 0
		if cluster {
			port = 20000 + rand.IntN(25000)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		if cluster {
			l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
			if err != nil {
				l.Close()
				continue
			}
			l2.Close()
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port")
}

// Cluster starts three redis-server processes in cluster mode, joins them
// into a cluster of three masters with redis-cli --cluster create, waits
// until every node reports cluster_state:ok, and returns the URL
// redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3. The test's
// cleanup stops the nodes.
func Cluster(t testing.TB) string {
	t.Helper()
	need(t, "redis-server", "redis-cli")
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		addrs, err := startCluster(t)
		if err == nil {
			return "redis+cluster://" + strings.Join(addrs, ",")
		}
		last = err
	}
	t.Fatalf("redistest: cannot start a cluster: %v", last)
	return ""
}

func startCluster(t testing.TB) ([]string, error) {
	var nodes []*Instance
	for len(nodes) < 3 {
		port, err := freePort(true)
		if err != nil {
			return nil, err
		}
		in := &Instance{t: t, dir: t.TempDir(), port: port, args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		}}
		if err := in.start(); err != nil {
			continue // the port was taken meanwhile: another one
		}
		t.Cleanup(in.Kill)
		nodes = append(nodes, in)
	}
	addrs := make([]string, len(nodes))
	for i, in := range nodes {
		addrs[i] = in.Addr()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		for _, in := range nodes {
			in.Kill()
		}
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range addrs {
		for {
			info, err := command(addr, "CLUSTER INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				for _, in := range nodes {
					in.Kill()
				}
				return nil, fmt.Errorf("cluster not ok after 20s on %s: %q %v", addr, info, err)
			}
			time.Sleep(20 * time.Millisecond) // polling for readiness, bounded above
		}
	}
	return addrs, nil
}
