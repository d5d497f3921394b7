package topfleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/topk"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// clock is a fake clock that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func client(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	c, err := redisstore.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fleetOf fills two boards, one per instance, with a client far over its
// limit through each and a crowd, and returns the instances' Fleets on
// url and the true counts.
func fleetOf(t *testing.T, url string, clk *clock) ([]*Fleet, map[string]uint64) {
	truth := map[string]uint64{}
	var fleets []*Fleet
	for i := range 2 {
		b := topk.NewBoard(8)
		add := func(key string, n uint64) {
			b.Add(clk.Now(), "api", topk.Refused, key, n)
			truth[key] += n
		}
		add("heavy", 500)
		for j := range 300 {
			add(fmt.Sprintf("crowd-%d-%d", i, j%40), 1)
		}
		b.Add(clk.Now(), "login", topk.Near, "near-"+fmt.Sprint(i), 3)
		fleets = append(fleets, New(client(t, url), b, WithID(fmt.Sprint("gw", i)), WithClock(clk)))
	}
	return fleets, truth
}

func start() *clock { return &clock{t: time.Date(2026, 11, 28, 12, 0, 5, 0, time.UTC)} }

// Two instances on one Redis: each reads the same merged list, the heavy
// client first, every count within the stated bound.
func TestFleetAgrees(t *testing.T) {
	for name, url := range map[string]func(testing.TB, ...redistest.Option) string{
		"standalone": redistest.Server, "cluster": redistest.Cluster, "sentinel": redistest.Sentinel,
	} {
		t.Run(name, func(t *testing.T) { agree(t, url(t)) })
	}
}

func agree(t *testing.T, url string) {
	clk := start()
	fleets, truth := fleetOf(t, url, clk)
	ctx := context.Background()
	for _, f := range fleets {
		if err := f.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var answers []string
	for _, f := range fleets {
		tops, err := f.Read(ctx, []string{"api", "login", "none"}, "1m", 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(tops) != 6 {
			t.Fatalf("%d lists, want 3 rules × 2 kinds", len(tops))
		}
		api := tops[0]
		if api.Rule != "api" || api.Kind != topk.Refused || api.Instances != 2 || api.Total != 1600 {
			t.Fatalf("api refused: %+v; want 2 instances, total 1600", api)
		}
		for _, e := range api.Entries {
			if c := truth[e.Key]; e.Count < c || e.Count-c > api.Bound || e.Err > api.Bound || e.Count-e.Err > c {
				t.Fatalf("%+v: true count %d, bound %d", e, c, api.Bound)
			}
		}
		if e := api.Entries[0]; e.Key != "heavy" || e.Count < 1000 {
			t.Fatalf("first: %+v; want heavy, 1000", e)
		}
		if near := tops[3]; near.Rule != "login" || near.Kind != topk.Near || near.Total != 6 || len(near.Entries) != 2 {
			t.Fatalf("login near: %+v; want both instances' 3", near)
		}
		if none := tops[4]; none.Instances != 0 || len(none.Entries) != 0 {
			t.Fatalf("a rule nobody counted: %+v", none)
		}
		answers = append(answers, fmt.Sprint(tops))
	}
	if answers[0] != answers[1] {
		t.Fatalf("the instances disagree:\n%s\n%s", answers[0], answers[1])
	}
}

// An instance that stops publishing stops counting after the TTL, on the
// reader's clock; its keys carry that TTL in Redis.
func TestFleetExpires(t *testing.T) {
	url := redistest.Server(t)
	clk := start()
	fleets, _ := fleetOf(t, url, clk)
	ctx := context.Background()
	for _, f := range fleets {
		if err := f.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ttl := client(t, url).PTTL(ctx, fleets[0].recordKey("api", "gw0", "1h")).Val()
	if ttl <= 0 || ttl > DefaultTTL {
		t.Fatalf("a record's TTL: %v; want up to %v", ttl, DefaultTTL)
	}
	clk.Add(DefaultTTL - time.Second)
	if err := fleets[1].Publish(ctx); err != nil {
		t.Fatal(err)
	}
	instances := func() int {
		tops, err := fleets[1].Read(ctx, []string{"api"}, "1h", 5)
		if err != nil {
			t.Fatal(err)
		}
		return tops[0].Instances
	}
	if n := instances(); n != 2 {
		t.Fatalf("within the TTL: %d instances, want 2", n)
	}
	other := New(client(t, url), topk.NewBoard(1), WithClock(clk), WithPrefix("rk:top:serve:"))
	if tops, err := other.Read(ctx, []string{"api"}, "1h", 5); err != nil || tops[0].Instances != 0 {
		t.Fatalf("another prefix read %+v, %v; want nothing", tops, err)
	}
	clk.Add(2 * time.Second)
	if n := instances(); n != 1 {
		t.Fatalf("after gw0's TTL: %d instances, want 1", n)
	}
}

// Garbage in a record's key is skipped and counted; the other instances
// still answer. Reads are capped at WithMaxInstances.
func TestFleetSkipsGarbage(t *testing.T) {
	url := redistest.Server(t)
	clk := start()
	fleets, _ := fleetOf(t, url, clk)
	ctx := context.Background()
	for _, f := range fleets {
		if err := f.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := client(t, url)
	at := float64(clk.Now().UnixMilli())
	for i, junk := range []string{"{", "null", `{"v":1,"rule":"api","at":1,"tops":[{"kind":"refused","span":"1m","entries":[{"key":"x","count":5,"error":9}],"total":5}]}`, strings.Repeat("x", DefaultMaxBytes+1)} {
		id := fmt.Sprint("junk", i)
		c.Set(ctx, fleets[0].recordKey("api", id, "1m"), junk, time.Minute)
		c.ZAdd(ctx, fleets[0].index("api"), redis.Z{Score: at + 1, Member: id})
	}
	tops, err := fleets[0].Read(ctx, []string{"api"}, "1m", 3)
	if err != nil {
		t.Fatal(err)
	}
	if tops[0].Instances != 2 || fleets[0].Skipped() != 4 {
		t.Fatalf("%d instances, %d skipped; want 2 and 4", tops[0].Instances, fleets[0].Skipped())
	}
	var records atomic.Int64
	capped := New(c, topk.NewBoard(1), WithClock(clk), WithMaxInstances(3), WithErrors(func(what string) {
		if what == "record" {
			records.Add(1)
		}
	}))
	tops, err = capped.Read(ctx, []string{"api"}, "1m", 3)
	if err != nil {
		t.Fatal(err)
	}
	if tops[0].Instances+int(capped.Skipped()) != 3 || records.Load() != int64(capped.Skipped()) {
		t.Fatalf("%d read, %d skipped, %d told; want 3 in all, each skip told", tops[0].Instances, capped.Skipped(), records.Load())
	}
	if _, err := capped.Read(ctx, []string{"api"}, "5m", 3); err == nil {
		t.Fatal("an unknown span was read")
	}
}

// Run publishes every period until its context ends, then returns.
func TestRunPublishes(t *testing.T) {
	url := redistest.Server(t)
	b := topk.NewBoard(4)
	b.Add(time.Now(), "api", topk.Refused, "k", 1)
	f := New(client(t, url), b, WithID("runner"), WithPeriod(10*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	c := client(t, url)
	deadline := time.Now().Add(10 * time.Second)
	for c.Exists(ctx, f.recordKey("api", "runner", "1m")).Val() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("Run has not published in 10 s")
		}
		time.Sleep(10 * time.Millisecond) // polling, bounded above
	}
	cancel()
	<-done
}

// The cost of one publish of a board full of distinct keys, off the
// request path: reading the windows and encoding.
func BenchmarkRecord(b *testing.B) {
	now := time.Now()
	board := topk.NewBoard(200)
	for i := range 5000 {
		board.Add(now, "api", topk.Refused, fmt.Sprintf("203.0.113.%d/%d", i%256, i), 1)
		board.Add(now, "api", topk.Near, fmt.Sprintf("198.51.100.%d/%d", i%256, i), 1)
	}
	f := New(nil, board)
	var size int
	for b.Loop() {
		buf, err := encode(f.recordOf(now, "api", "1m"), DefaultMaxBytes)
		if err != nil {
			b.Fatal(err)
		}
		size = len(buf)
	}
	b.ReportMetric(float64(size), "bytes/record")
}

// The cost of a fleet query at the cap: 64 instances, each with a full
// record of one rule.
func BenchmarkRead64(b *testing.B) {
	url := redistest.Server(b)
	c, err := redisstore.NewClient(url)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	now := time.Now()
	board := topk.NewBoard(200)
	for i := range 5000 {
		board.Add(now, "api", topk.Refused, fmt.Sprintf("203.0.113.%d/%d", i%256, i), uint64(1+i%7))
	}
	ctx := context.Background()
	for i := range DefaultMaxInstances {
		if err := New(c, board, WithID(fmt.Sprint("gw", i))).Publish(ctx); err != nil {
			b.Fatal(err)
		}
	}
	f := New(c, board)
	for b.Loop() {
		tops, err := f.Read(ctx, []string{"api"}, "1m", 10)
		if err != nil || tops[0].Instances != DefaultMaxInstances {
			b.Fatalf("%v, %+v", err, tops)
		}
	}
}
