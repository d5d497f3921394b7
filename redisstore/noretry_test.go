package redisstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/shared"
	"github.com/redis/go-redis/v9"
)

// lossyProxy passes TCP connections through to a Redis server. Told to
// drop the reply to a command (drop), it passes the next command that
// holds a given string on to the server, reads the server's reply, and
// closes the client's connection instead of passing the reply on: the
// server ran the command, and the client reads EOF, as when a connection
// breaks between a command and its reply.
type lossyProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]bool
	clients []net.Conn // the client's ends, as its dial hook saw them
	marker  []byte     // what drop watches for; nil: nothing
	armed   bool       // the next command holding marker loses its reply
	sent    int        // commands holding marker sent since drop
}

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's redis:// URL.
func (p *lossyProxy) URL() string { return "redis://" + p.ln.Addr().String() }

// watch counts from now on the commands that hold marker.
func (p *lossyProxy) watch(marker string) { p.watchDrop(marker, false) }

// drop is watch, and the reply to the next command that holds marker is
// dropped.
func (p *lossyProxy) drop(marker string) { p.watchDrop(marker, true) }

func (p *lossyProxy) watchDrop(marker string, drop bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.armed, p.sent = []byte(marker), drop, 0
}

// sends is how many commands holding the watched marker went to the
// server since watch or drop.
func (p *lossyProxy) sends() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

// cut closes every connection, as a server that restarts would.
func (p *lossyProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// cutSeen is cut, and then waits until the client's ends of the
// connections read their end, as go-redis's pool does before reusing one:
// on a loaded machine the kernel may not have passed the close on to the
// client's socket yet, and a command written to it meanwhile is not a
// command written to a connection found dead.
func (p *lossyProxy) cutSeen(t *testing.T) {
	t.Helper()
	p.cut()
	p.mu.Lock()
	clients := slices.Clone(p.clients)
	p.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range clients {
		for !peerClosed(c) {
			if time.Now().After(deadline) {
				t.Fatalf("the client's end %v never read the proxy's close", c.LocalAddr())
			}
			time.Sleep(time.Millisecond) // polling, bounded by the deadline
		}
	}
}

// peerClosed reports whether reading c would end (the peer closed it, or c
// is closed), without reading anything from it: go-redis's health check.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = (n == 0 && err == nil) || (err != nil && err != syscall.EAGAIN)
		return true
	})
	return closed || err != nil
}

// DialHook records the client's connections to the proxy (a redis.Hook).
func (p *lossyProxy) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			p.mu.Lock()
			p.clients = append(p.clients, c)
			p.mu.Unlock()
		}
		return c, err
	}
}

func (p *lossyProxy) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *lossyProxy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (p *lossyProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		p.wg.Go(func() { p.pass(c, s) })
	}
}

// pass copies commands from client c to server s, and replies back, until
// either side closes or a reply is dropped.
func (p *lossyProxy) pass(c, s net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, s)
		p.mu.Unlock()
	}()
	dropNext := make(chan struct{}, 1) // the next reply on s is dropped
	p.wg.Go(func() {
		defer c.Close()
		defer s.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				select {
				case <-dropNext:
					return // the server has answered: close without passing it on
				default:
				}
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if p.watched(buf[:n]) {
				dropNext <- struct{}{}
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// watched counts cmd if it holds the watched marker, and reports whether its
// reply is to be dropped.
func (p *lossyProxy) watched(cmd []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker == nil || !bytes.Contains(cmd, p.marker) {
		return false
	}
	p.sent++
	drop := p.armed
	p.armed = false
	return drop
}

// lossyStore is a store on a fresh server through a lossy proxy.
func lossyStore(t *testing.T) (*Store, *lossyProxy) {
	t.Helper()
	in := redistest.Start(t)
	p := newLossyProxy(t, in.Addr())
	client, err := NewClient(p.URL())
	if err != nil {
		t.Fatal(err)
	}
	client.AddHook(p) // before the first dial: Open's, without the hook
	s, err := newStore(client, true, []Option{WithMinTTL(time.Hour)})
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return s, p
}

// lossyLimit is the limit of the lossy tests, and lossyNow their instant:
// one window holds them all.
var (
	lossyLimit = ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Hour}
	lossyNow   = time.UnixMicro(1_700_000_000_000_000)
)

// windowCounts are the counts of keys' windows at lossyNow, as Redis holds
// them, read in one call: for several keys, one run of many.lua.
func windowCounts(t *testing.T, s *Store, keys ...string) []int64 {
	t.Helper()
	items := make([]shared.Item, len(keys))
	for i, k := range keys {
		items[i] = shared.Item{Key: k, Limit: lossyLimit, Now: lossyNow.UnixMicro()}
	}
	if err := (remote{s}).Add(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	counts := make([]int64, len(keys))
	for i, it := range items {
		if it.Err != nil {
			t.Fatal(it.Err)
		}
		counts[i] = it.State.Window.Count
	}
	return counts
}

// takeN takes n requests of one on key, and returns the last decision.
func takeN(t *testing.T, s *Store, key string, n int) (ratekeeper.Request, ratekeeper.Decision) {
	t.Helper()
	req := ratekeeper.Request{Key: key, Limit: lossyLimit, N: 1, Now: lossyNow}
	var d ratekeeper.Decision
	for range n {
		var err error
		if d, err = s.Take(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("take %s refused: %+v", key, d)
		}
	}
	return req, d
}

// A refund whose reply is lost after Redis ran it is not sent again: the
// count drops by what the decision took, not twice that, and the caller
// learns that the refund may not have been made.
func TestRefundWithLostReplyRunsOnce(t *testing.T) {
	s, p := lossyStore(t)
	req, d := takeN(t, s, "refund-lost", 3)

	p.drop(s.scripts[algoIndex(lossyLimit.Algorithm)].Hash())
	err := s.Refund(context.Background(), req, d)
	if sent := p.sends(); sent != 1 {
		t.Errorf("the refund went to Redis %d times, want once", sent)
	}
	if got := windowCounts(t, s, "refund-lost")[0]; got != 2 {
		t.Errorf("count after one refund of 3 taken = %d, want 2", got)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("refund: %v, want io.EOF (its reply was lost)", err)
	}
}

// Counts given back in one run of many.lua (a sync's negative counts, a
// lease's unused quota; the batch of concurrent refunds) whose reply is
// lost are not given back twice.
func TestGiveBackWithLostReplyRunsOnce(t *testing.T) {
	s, p := lossyStore(t)
	keys := []string{"give-back-lost-1", "give-back-lost-2"}
	for _, k := range keys {
		takeN(t, s, k, 3)
	}
	windowCounts(t, s, keys...) // loads many.lua: a lost NOSCRIPT would be no test
	items := make([]shared.Item, len(keys))
	for i, k := range keys {
		items[i] = shared.Item{Key: k, Limit: lossyLimit, N: -1, At: lossyNow.UnixMicro(), Now: lossyNow.UnixMicro()}
	}

	p.drop(s.pipe.one.many.Hash()) // two items: one batch, one run of many.lua
	err := (remote{s}).Add(context.Background(), items)
	if sent := p.sends(); sent != 1 {
		t.Errorf("many.lua went to Redis %d times, want once", sent)
	}
	for i, got := range windowCounts(t, s, keys...) {
		if got != 2 {
			t.Errorf("%s: count after giving back 1 of 3 = %d, want 2", keys[i], got)
		}
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("give back: %v, want io.EOF (its reply was lost)", err)
	}
}

// A decision whose reply is lost is still sent again by go-redis, and
// answered: Redis then counts it twice, on the safe side of the limit.
func TestTakeWithLostReplyIsRetried(t *testing.T) {
	s, p := lossyStore(t)
	takeN(t, s, "take-lost", 3)

	p.drop(s.scripts[algoIndex(lossyLimit.Algorithm)].Hash())
	req, d := takeN(t, s, "take-lost", 1)
	if sent := p.sends(); sent != 2 {
		t.Errorf("the take went to Redis %d times, want twice (go-redis's retry)", sent)
	}
	if d.Remaining != 5 {
		t.Errorf("the retried take answered remaining %d, want 5 (counted twice)", d.Remaining)
	}
	if got := windowCounts(t, s, req.Key)[0]; got != 5 {
		t.Errorf("count after 4 takes, one of them retried = %d, want 5", got)
	}
}

// A refund on a connection the server closed while it was idle goes
// through, once: go-redis finds the connection dead before writing to it
// and dials another, which is no retry.
func TestRefundOnConnectionClosedWhileIdle(t *testing.T) {
	s, p := lossyStore(t)
	req, d := takeN(t, s, "refund-idle", 3)

	p.watch(s.scripts[algoIndex(lossyLimit.Algorithm)].Hash())
	p.cutSeen(t)
	if err := s.Refund(context.Background(), req, d); err != nil {
		t.Fatalf("refund after the connections were closed: %v", err)
	}
	if sent := p.sends(); sent != 1 {
		t.Errorf("the refund went to Redis %d times, want once", sent)
	}
	if got := windowCounts(t, s, "refund-idle")[0]; got != 2 {
		t.Errorf("count after one refund of 3 taken = %d, want 2", got)
	}
}

// Give-backs sent once still load their script when the server has lost
// it: EVALSHA answered NOSCRIPT was not run, and EVAL follows.
func TestGiveBackLoadsItsScript(t *testing.T) {
	s, _ := lossyStore(t)
	keys := []string{"give-back-load-1", "give-back-load-2"}
	req, d := takeN(t, s, keys[0], 3)
	takeN(t, s, keys[1], 3)
	ctx := context.Background()

	if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Refund(ctx, req, d); err != nil { // alone: its algorithm's script
		t.Fatal(err)
	}
	if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	items := make([]shared.Item, len(keys))
	for i, k := range keys {
		items[i] = shared.Item{Key: k, Limit: lossyLimit, N: -1, At: lossyNow.UnixMicro(), Now: lossyNow.UnixMicro()}
	}
	if err := (remote{s}).Add(ctx, items); err != nil { // together: many.lua
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Err != nil {
			t.Fatal(it.Err)
		}
	}
	for i, got := range windowCounts(t, s, keys...) {
		if want := int64(1 + i); got != want { // the first key gave back twice: refund, then add
			t.Errorf("%s: count = %d, want %d", keys[i], got, want)
		}
	}
}
