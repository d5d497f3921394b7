// Package redistest starts real redis-server processes for tests: a
// standalone server (Server, Start), a three-master Redis Cluster (Cluster)
// and a primary with a replica watched by a sentinel (Sentinel). Each runs
// on free loopback ports with its own temporary directory, and stops when
// the test ends. WithTLS makes them speak TLS only, to clients and to each
// other.
//
// Without redis-server on PATH they skip the test with a loud message, except
// when the environment has CI=true, where they fail it: CI must run every
// Redis test (make test installs redis-server and redis-tools).
package redistest

import (
	"bufio"
	"crypto/tls"
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

	"github.com/ratekeeper/ratekeeper/internal/tlstest"
)

// need finds the binaries or skips (fails under CI=true) the test.
func need(t testing.TB, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			notRun(t, fmt.Sprintf("%s is not installed (apt-get install redis-server redis-tools, or run make test-deps)", b))
		}
	}
}

// notRun skips the test saying why, or fails it under CI=true.
func notRun(t testing.TB, why string) {
	t.Helper()
	msg := "!!! REDIS TEST NOT RUN: " + why
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " — and CI=true requires it")
	}
	t.Skip(msg)
}

// needTLS skips (fails under CI=true) a TLS test whose redis-server could
// not start because it does not know the tls-* directives.
func needTLS(t testing.TB, tf *tlsFiles, err error) {
	t.Helper()
	if tf != nil && err != nil && strings.Contains(err.Error(), "Bad directive") {
		notRun(t, "redis-server is built without TLS (Debian's redis-server has it): "+err.Error())
	}
}

// Option changes the servers Server, Start, Cluster and Sentinel run.
type Option func(*options)

type options struct {
	tls *TLS
}

// TLS is how the servers speak TLS (WithTLS).
type TLS struct {
	// CA signs the servers' certificates (for 127.0.0.1 and localhost)
	// and the one each server shows when it is the client (replication,
	// the cluster bus, a sentinel's connections); client certificates are
	// checked against it.
	CA *tlstest.CA
	// AuthClients refuses a client that sends no certificate signed by CA
	// (--tls-auth-clients yes). Otherwise a certificate is checked only
	// if sent (optional).
	AuthClients bool
}

// WithTLS makes the servers listen with TLS only (--port 0 --tls-port P),
// and talk TLS to each other: their URLs are rediss://,
// rediss+cluster:// and rediss+sentinel://.
func WithTLS(c TLS) Option {
	return func(o *options) { o.tls = &c }
}

func buildOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Instance is one redis-server process. Its methods are safe for
// concurrent use.
type Instance struct {
	t    testing.TB
	dir  string
	port int
	conf string // a config file to start from (a sentinel's), or ""
	args []string
	tls  *tlsFiles // nil: clear text

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// tlsFiles are the files of a TLS server, and how this package dials it.
type tlsFiles struct {
	args   []string    // redis-server's TLS arguments
	cli    []string    // redis-cli's
	client *tls.Config // for ping and command
}

// newTLSFiles writes a server certificate and a client one signed by
// c.CA to a temporary directory.
func newTLSFiles(t testing.TB, c TLS) *tlsFiles {
	t.Helper()
	dir := t.TempDir()
	ca := c.CA.Write(t, dir, "ca")
	cert, key := c.CA.Server(t, "127.0.0.1", "localhost").Write(t, dir, "server")
	client := c.CA.Client(t, "redistest")
	ccert, ckey := client.Write(t, dir, "client")
	auth := "optional"
	if c.AuthClients {
		auth = "yes"
	}
	return &tlsFiles{
		args: []string{
			"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca,
			"--tls-client-cert-file", ccert, "--tls-client-key-file", ckey,
			"--tls-auth-clients", auth, "--tls-replication", "yes",
		},
		cli:    []string{"--tls", "--cacert", ca, "--cert", ccert, "--key", ckey},
		client: &tls.Config{RootCAs: c.CA.Pool(), Certificates: []tls.Certificate{client.TLS(t)}},
	}
}

// Server starts a standalone redis-server and returns its URL,
// redis://127.0.0.1:PORT/0 (rediss:// WithTLS).
func Server(t testing.TB, opts ...Option) string {
	t.Helper()
	return Start(t, opts...).URL()
}

// Start starts a standalone redis-server on a free loopback port; the test's
// cleanup stops it. Tests that stop and restart the server (Kill, Restart)
// use Start rather than Server.
func Start(t testing.TB, opts ...Option) *Instance {
	t.Helper()
	need(t, "redis-server")
	o := buildOptions(opts)
	var tf *tlsFiles
	if o.tls != nil {
		tf = newTLSFiles(t, *o.tls)
	}
	return launch(t, tf, "")
}

// launch starts a redis-server with args on a free loopback port, from a
// config file holding conf if it is not empty, and has the test's cleanup
// stop it.
func launch(t testing.TB, tf *tlsFiles, conf string, args ...string) *Instance {
	t.Helper()
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(false)
		if err != nil {
			last = err
			continue
		}
		in := &Instance{t: t, dir: t.TempDir(), port: port, tls: tf, args: args}
		if conf != "" {
			// Sentinel rewrites its config file, so each gets its own.
			in.conf = filepath.Join(in.dir, "redis.conf")
			if err := os.WriteFile(in.conf, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if last = in.start(); last == nil {
			t.Cleanup(in.Kill)
			return in
		}
	}
	needTLS(t, tf, last)
	t.Fatalf("redistest: cannot start redis-server: %v", last)
	return nil
}

// Addr is the server's host:port.
func (in *Instance) Addr() string { return "127.0.0.1:" + strconv.Itoa(in.port) }

// URL is the server's redis:// URL (rediss:// over TLS), database 0.
func (in *Instance) URL() string {
	if in.tls != nil {
		return "rediss://" + in.Addr() + "/0"
	}
	return "redis://" + in.Addr() + "/0"
}

func (in *Instance) start() error {
	var args []string
	if in.conf != "" {
		args = append(args, in.conf)
	}
	if in.tls != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(in.port))
		args = append(args, in.tls.args...)
	} else {
		args = append(args, "--port", strconv.Itoa(in.port))
	}
	args = append(append(args,
		"--bind", "127.0.0.1",
		"--dir", in.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(in.dir, "redis.log"),
		// A replica's first sync starts at once, not 5 s later.
		"--repl-diskless-sync-delay", "0",
	), in.args...)
	cmd := exec.Command("redis-server", args...)
	// Errors in the arguments go to stderr, before the log file opens.
	out, err := os.Create(filepath.Join(in.dir, "redis.out"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
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
		if in.ping() == nil {
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
	early, _ := os.ReadFile(filepath.Join(in.dir, "redis.out"))
	b, _ := os.ReadFile(filepath.Join(in.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(early)+"\n"+string(b)), "\n")
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

// dial connects to the server, over TLS if it speaks it.
func (in *Instance) dial() (net.Conn, error) {
	d := &net.Dialer{Timeout: time.Second}
	if in.tls != nil {
		return tls.DialWithDialer(d, "tcp", in.Addr(), in.tls.client)
	}
	return d.Dial("tcp", in.Addr())
}

// ping sends PING and expects +PONG.
func (in *Instance) ping() error {
	line, err := in.command("PING")
	if err != nil {
		return err
	}
	if line != "PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// command sends one inline command and returns the first line of the reply
// (without its type) or, for a bulk reply, its body.
func (in *Instance) command(cmd string) (string, error) {
	c, err := in.dial()
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
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "+") {
		return line[1:], nil
	}
	return line, nil
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

// Cluster starts three redis-server processes in cluster mode and joins
// them into a cluster of three masters with redis-cli --cluster create.
// It waits until every node reports cluster_state:ok, and returns the URL
// redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 (rediss+cluster://
// WithTLS, where the cluster bus is TLS too). The test's cleanup stops the
// nodes.
func Cluster(t testing.TB, opts ...Option) string {
	t.Helper()
	need(t, "redis-server", "redis-cli")
	o := buildOptions(opts)
	var tf *tlsFiles
	scheme := "redis+cluster://"
	if o.tls != nil {
		tf, scheme = newTLSFiles(t, *o.tls), "rediss+cluster://"
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		addrs, err := startCluster(t, tf)
		if err == nil {
			return scheme + strings.Join(addrs, ",")
		}
		last = err
		needTLS(t, tf, err)
	}
	t.Fatalf("redistest: cannot start a cluster: %v", last)
	return ""
}

func startCluster(t testing.TB, tf *tlsFiles) ([]string, error) {
	var nodes []*Instance
	failed := 0
	for len(nodes) < 3 {
		port, err := freePort(true)
		if err != nil {
			return nil, err
		}
		in := &Instance{t: t, dir: t.TempDir(), port: port, tls: tf, args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		}}
		if tf != nil {
			in.args = append(in.args, "--tls-cluster", "yes")
		}
		if err := in.start(); err != nil {
			// The port was taken meanwhile: another one; but a server
			// that never starts is an error, not a loop.
			if failed++; failed == 10 {
				for _, in := range nodes {
					in.Kill()
				}
				return nil, err
			}
			continue
		}
		t.Cleanup(in.Kill)
		nodes = append(nodes, in)
	}
	addrs := make([]string, len(nodes))
	for i, in := range nodes {
		addrs[i] = in.Addr()
	}
	var args []string
	if tf != nil {
		args = append(args, tf.cli...)
	}
	args = append(append(args, "--cluster", "create"), addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		for _, in := range nodes {
			in.Kill()
		}
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, in := range nodes {
		for {
			info, err := in.command("CLUSTER INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				for _, in := range nodes {
					in.Kill()
				}
				return nil, fmt.Errorf("cluster not ok after 20s on %s: %q %v", in.Addr(), info, err)
			}
			time.Sleep(20 * time.Millisecond) // polling for readiness, bounded above
		}
	}
	return addrs, nil
}

// MasterName is the name Sentinel knows Sentinel's primary by.
const MasterName = "mymaster"

// Sentinel starts a primary, a replica of it and a sentinel that watches
// them (quorum 1). It waits until the replica has synced and the sentinel
// knows the primary, and returns the URL
// redis+sentinel://127.0.0.1:S/mymaster (rediss+sentinel:// WithTLS, where
// replication and the sentinel's own connections are TLS too). The
// sentinel would fail over after 30 s without the primary; the test's
// cleanup stops all three.
func Sentinel(t testing.TB, opts ...Option) string {
	t.Helper()
	need(t, "redis-server")
	o := buildOptions(opts)
	var tf *tlsFiles
	if o.tls != nil {
		tf = newTLSFiles(t, *o.tls)
	}
	primary := launch(t, tf, "")
	replica := launch(t, tf, "", "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	sentinel := launch(t, tf, fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n", MasterName, primary.port), "--sentinel")
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := replica.command("INFO replication")
		known, err2 := sentinel.command("INFO sentinel")
		if err == nil && err2 == nil && strings.Contains(info, "master_link_status:up") &&
			strings.Contains(known, "status=ok,address=127.0.0.1:"+strconv.Itoa(primary.port)+",slaves=1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the replica or the sentinel is not ready after 20s: %q %v; %q %v; replica: %s; sentinel: %s",
				info, err, known, err2, replica.log(), sentinel.log())
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, bounded above
	}
	scheme := "redis+sentinel://"
	if o.tls != nil {
		scheme = "rediss+sentinel://"
	}
	return scheme + sentinel.Addr() + "/" + MasterName
}
