package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis topologies the faults are injected into, each made of real
// redis-server processes on loopback ports, without persistence.

// node is one redis-server (or sentinel) process that can be killed and
// started again on its port.
type node struct {
	t    testing.TB
	port int
	dir  string
	args []string // after the common ones

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (n *node) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// startNode starts a redis-server with args on a free port (two, with the
// cluster bus); the test's cleanup kills it.
func startNode(t testing.TB, cluster bool, args ...string) *node {
	t.Helper()
	for range 5 {
		n := &node{t: t, port: freePort(t, cluster), dir: t.TempDir(), args: args}
		if err := n.start(); err == nil {
			t.Cleanup(n.kill)
			return n
		} else if !strings.Contains(err.Error(), "in use") {
			t.Fatal(err)
		}
	}
	t.Fatal("no free port for redis-server")
	return nil
}

func (n *node) start() error {
	args := append([]string{
		"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1", "--dir", n.dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no",
		"--logfile", filepath.Join(n.dir, "redis.log"),
	}, n.args...)
	if len(n.args) > 0 && n.args[0] == "sentinel" {
		// redis-server sentinel.conf --sentinel: the monitor is in the
		// file, which the sentinel rewrites.
		args = []string{filepath.Join(n.dir, "sentinel.conf"), "--sentinel", "--dir", n.dir, "--logfile", filepath.Join(n.dir, "redis.log")}
	}
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for ping(n.addr()) != nil {
		select {
		case <-done:
			return fmt.Errorf("redis-server on %d exited: %s", n.port, n.log())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on %d did not answer in 10s: %s", n.port, n.log())
		}
		time.Sleep(5 * time.Millisecond) // polling for readiness, bounded above
	}
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return nil
}

func (n *node) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// kill stops the process at once (SIGKILL): no shutdown, nothing saved.
func (n *node) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// restart starts the process again on its port, empty.
func (n *node) restart() {
	n.t.Helper()
	if err := n.start(); err != nil {
		n.t.Fatalf("restart: %v", err)
	}
}

// restartAsReplicaOf starts the node again as a replica of the primary at
// addr, as an operator brings back a failed primary that kept no data.
func (n *node) restartAsReplicaOf(addr string) {
	n.t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	var args []string
	for i := 0; i < len(n.args); i++ {
		if n.args[i] == "--replicaof" {
			i += 2 // its host and port
			continue
		}
		args = append(args, n.args[i])
	}
	n.args = append(args, "--replicaof", host, port)
	n.restart()
}

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
	b := make([]byte, 64)
	k, err := c.Read(b)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(b[:k]), "+PONG") {
		return fmt.Errorf("%q", b[:k])
	}
	return nil
}

// do runs one command on addr.
func do(addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

func mustDo(t testing.TB, addr string, args ...any) any {
	t.Helper()
	v, err := do(addr, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return v
}

// freePort finds a free loopback port (and port+10000 for a cluster bus).
func freePort(t testing.TB, cluster bool) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !cluster {
			return p
		}
		if p+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			bus.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// waitFor polls cond until it holds, or fails the test after limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not after %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond) // polling, bounded above
	}
	return time.Since(start)
}

// topology is the Redis the gateways share, with its faults.
type topology struct {
	kind  string // standalone, sentinel, cluster
	url   string
	nodes []*node // data nodes: the primary first (standalone, sentinel)
	// sentinel
	sentinels []*node
	master    string
}

// newStandalone is one redis-server.
func newStandalone(t testing.TB) *topology {
	n := startNode(t, false)
	return &topology{kind: "standalone", url: "redis://" + n.addr() + "/0", nodes: []*node{n}}
}

// newSentinel is a primary, a replica and three sentinels watching them,
// which agree (two of three) that the primary is down after 1 s.
func newSentinel(t testing.TB) *topology {
	primary := startNode(t, false)
	replica := startNode(t, false, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	top := &topology{kind: "sentinel", nodes: []*node{primary, replica}, master: "faults"}
	var addrs []string
	for range 3 {
		port := freePort(t, false)
		s := &node{t: t, port: port, dir: t.TempDir(), args: []string{"sentinel"}}
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\nsentinel resolve-hostnames no\nsentinel monitor faults 127.0.0.1 %d 2\nsentinel down-after-milliseconds faults 1000\nsentinel failover-timeout faults 10000\nsentinel parallel-syncs faults 1\n", port, primary.port)
		if err := os.WriteFile(filepath.Join(s.dir, "sentinel.conf"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.kill)
		top.sentinels = append(top.sentinels, s)
		addrs = append(addrs, s.addr())
	}
	top.url = "redis+sentinel://" + strings.Join(addrs, ",") + "/faults/0"
	waitFor(t, 20*time.Second, "the replica in sync and known to every sentinel", func() bool {
		info, err := do(replica.addr(), "INFO", "replication")
		if err != nil || !strings.Contains(fmt.Sprint(info), "master_link_status:up") {
			return false
		}
		for _, s := range top.sentinels {
			v, err := do(s.addr(), "SENTINEL", "REPLICAS", "faults")
			if err != nil || len(v.([]any)) == 0 {
				return false
			}
		}
		return true
	})
	return top
}

// masterAddr is the primary the sentinels agree on now.
func (top *topology) masterAddr() string {
	for _, s := range top.sentinels {
		if v, err := do(s.addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", top.master); err == nil {
			a := v.([]any)
			return fmt.Sprint(a[0]) + ":" + fmt.Sprint(a[1])
		}
	}
	return ""
}

// agree reports whether every sentinel names a primary other than old.
func (top *topology) agree(old string) bool {
	for _, s := range top.sentinels {
		v, err := do(s.addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", top.master)
		if err != nil {
			return false
		}
		if a := v.([]any); fmt.Sprint(a[0])+":"+fmt.Sprint(a[1]) == old {
			return false
		}
	}
	return true
}

// split is how long two primaries admitted in a Sentinel failover: from
// the replica's promotion ("MASTER MODE enabled" in its log) to the last
// sentinel's "+switch-master", which moves the clients subscribed to it.
// Sentinel sees the promotion at its next INFO, up to a second later, and
// the old primary admits until then: what it admits is lost.
func (top *topology) split() (time.Duration, error) {
	var logs [][]byte
	for _, n := range append(slices.Clone(top.nodes), top.sentinels...) {
		b, err := os.ReadFile(filepath.Join(n.dir, "redis.log"))
		if err != nil {
			return 0, err
		}
		logs = append(logs, b)
	}
	promoted, err := lastLogged(logs[:len(top.nodes)], "MASTER MODE enabled")
	if err != nil {
		return 0, err
	}
	switched, err := lastLogged(logs[len(top.nodes):], "+switch-master")
	if err != nil {
		return 0, err
	}
	return switched.Sub(promoted), nil
}

// lastLogged is the latest time a line containing what was logged in
// logs, read from redis-server's prefix ("pid:role 28 Nov 2026 11:04:02.664").
func lastLogged(logs [][]byte, what string) (time.Time, error) {
	var last time.Time
	for _, b := range logs {
		for line := range strings.SplitSeq(string(b), "\n") {
			if !strings.Contains(line, what) {
				continue
			}
			f := strings.Fields(line)
			if len(f) < 5 {
				continue
			}
			at, err := time.ParseInLocation("2 Jan 2006 15:04:05.000", strings.Join(f[1:5], " "), time.Local)
			if err != nil {
				return time.Time{}, fmt.Errorf("redis log line %q: %w", line, err)
			}
			if at.After(last) {
				last = at
			}
		}
	}
	if last.IsZero() {
		return last, fmt.Errorf("no %q in the redis logs", what)
	}
	return last, nil
}

// nodeAt is the data node listening on addr.
func (top *topology) nodeAt(addr string) *node {
	for _, n := range top.nodes {
		if n.addr() == addr {
			return n
		}
	}
	return nil
}

// newCluster is three primaries, each with a replica, promoted 1 s after
// its primary stops answering; the live primaries keep serving their slots
// meanwhile (cluster-require-full-coverage no, as docs/reliability.md
// recommends), unless fullCoverage (Redis's default).
func newCluster(t testing.TB, fullCoverage bool) *topology {
	coverage := "no"
	if fullCoverage {
		coverage = "yes"
	}
	top := &topology{kind: "cluster"}
	var addrs []string
	for range 6 {
		n := startNode(t, true, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			"--cluster-require-full-coverage", coverage)
		top.nodes = append(top.nodes, n)
		addrs = append(addrs, n.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	waitFor(t, 30*time.Second, "the cluster ok on every node, replicas in sync", func() bool {
		for _, n := range top.nodes {
			info, err := do(n.addr(), "CLUSTER", "INFO")
			if err != nil || !strings.Contains(fmt.Sprint(info), "cluster_state:ok") {
				return false
			}
			repl, err := do(n.addr(), "INFO", "replication")
			if err != nil || strings.Contains(fmt.Sprint(repl), "role:slave") && !strings.Contains(fmt.Sprint(repl), "master_link_status:up") {
				return false
			}
		}
		return true
	})
	top.url = "redis+cluster://" + strings.Join(addrs, ",")
	return top
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	primary  bool
	failed   bool
	of       string // a replica's primary id
	slots    [][2]int
}

// clusterNodes reads the cluster's view from any node that answers.
func (top *topology) clusterNodes() []clusterNode {
	for _, n := range top.nodes {
		v, err := do(n.addr(), "CLUSTER", "NODES")
		if err != nil {
			continue
		}
		var out []clusterNode
		for _, line := range strings.Split(strings.TrimSpace(fmt.Sprint(v)), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			cn := clusterNode{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0], primary: strings.Contains(f[2], "master"), failed: strings.Contains(f[2], "fail"), of: f[3]}
			for _, s := range f[8:] {
				if strings.HasPrefix(s, "[") {
					continue // a slot being migrated
				}
				lo, hi, ok := strings.Cut(s, "-")
				if !ok {
					hi = lo
				}
				a, _ := strconv.Atoi(lo)
				b, _ := strconv.Atoi(hi)
				cn.slots = append(cn.slots, [2]int{a, b})
			}
			out = append(out, cn)
		}
		return out
	}
	return nil
}

// ownerOf is the primary that serves slot now.
func (top *topology) ownerOf(slot int) clusterNode {
	for _, cn := range top.clusterNodes() {
		if !cn.primary || cn.failed {
			continue
		}
		for _, r := range cn.slots {
			if slot >= r[0] && slot <= r[1] {
				return cn
			}
		}
	}
	return clusterNode{}
}

// hotSlot is the slot of the gateways' key of the rule named rule (its
// Redis key begins rk:{rule:), as a primary holds it. (It matched any key
// that held the name, and serve's key for the same API key, on another
// primary, was found first in about half the runs: the fault then hit a
// primary the hot key was not on.)
func (top *topology) hotSlot(t testing.TB, rule string) int {
	for _, cn := range top.clusterNodes() {
		if !cn.primary || cn.failed {
			continue
		}
		v, err := do(cn.addr, "KEYS", "rk:{"+rule+":*")
		if err != nil {
			continue
		}
		for _, k := range v.([]any) {
			s := mustDo(t, cn.addr, "CLUSTER", "KEYSLOT", k)
			return int(s.(int64))
		}
	}
	t.Fatalf("no key of rule %q in the cluster", rule)
	return 0
}

// migrate moves slot from its primary to another, key by key, while it is
// in use: clients meanwhile get ASK for keys already moved, then MOVED.
func (top *topology) migrate(t testing.TB, slot int) (from, to string) {
	src := top.ownerOf(slot)
	var dst clusterNode
	for _, cn := range top.clusterNodes() {
		if cn.primary && !cn.failed && cn.id != src.id {
			dst = cn
			break
		}
	}
	mustDo(t, dst.addr, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id)
	mustDo(t, src.addr, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id)
	host, port, _ := net.SplitHostPort(dst.addr)
	for {
		v := mustDo(t, src.addr, "CLUSTER", "GETKEYSINSLOT", slot, 10)
		keys := v.([]any)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		args = append(args, keys...)
		mustDo(t, src.addr, args...)
		time.Sleep(50 * time.Millisecond) // let requests meet the slot half moved
	}
	for _, cn := range top.clusterNodes() {
		if cn.primary && !cn.failed {
			mustDo(t, cn.addr, "CLUSTER", "SETSLOT", slot, "NODE", dst.id)
		}
	}
	return src.addr, dst.addr
}

// clusterOK reports whether every live node says the cluster is ok and
// every slot has a live primary.
func (top *topology) clusterOK() bool {
	for _, n := range top.nodes {
		n.mu.Lock()
		alive := n.cmd != nil
		n.mu.Unlock()
		if !alive {
			continue
		}
		info, err := do(n.addr(), "CLUSTER", "INFO")
		if err != nil || !strings.Contains(fmt.Sprint(info), "cluster_state:ok") {
			return false
		}
	}
	return true
}

// primaries are the addresses of the live primaries, sorted.
func (top *topology) primaries() []string {
	var out []string
	for _, cn := range top.clusterNodes() {
		if cn.primary && !cn.failed {
			out = append(out, cn.addr)
		}
	}
	slices.Sort(out)
	return out
}

// clients counts the connections each data node has, for the leak check.
func (top *topology) clients() int {
	total := 0
	for _, n := range top.nodes {
		v, err := do(n.addr(), "INFO", "clients")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(fmt.Sprint(v), "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
				k, _ := strconv.Atoi(s)
				total += k - 1 // not this INFO's own
			}
		}
	}
	return total
}
