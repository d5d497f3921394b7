package topfleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/topk"
)

// Defaults of a Fleet's options.
const (
	// DefaultPeriod is how often an instance publishes: a third of the
	// minute span's 15 s slice. So the fleet's answer lags a local one
	// by 5 s at most, for one pipeline per instance every 5 s.
	DefaultPeriod = 5 * time.Second
	// DefaultTTL is how long a summary counts after it was published:
	// three periods, so one lost publish drops nobody.
	DefaultTTL = 3 * DefaultPeriod
	// DefaultMaxInstances caps the instances one read merges per rule.
	DefaultMaxInstances = 64
	// DefaultMaxBytes caps one instance's record of one rule.
	DefaultMaxBytes = 128 << 10
	// DefaultMaxEntries caps the entries a summary read back may hold.
	DefaultMaxEntries = 1000
	// Prefix starts every key a Fleet writes unless WithPrefix says
	// otherwise.
	Prefix = "rk:top:"
)

// Fleet publishes a topk.Board's summaries to Redis and reads back every
// instance's. It is safe for concurrent use.
type Fleet struct {
	client  redis.UniversalClient
	board   *topk.Board
	c       config
	skipped atomic.Uint64
}

type config struct {
	id, prefix                       string
	clock                            ratekeeper.Clock
	logger                           *slog.Logger
	onError                          func(what string)
	period, ttl                      time.Duration
	maxInstances, maxBytes, maxEntry int
}

// Option changes a Fleet.
type Option func(*config)

// WithID names the instance (default: host name, process id and random
// hex). Two instances with one ID overwrite each other.
func WithID(id string) Option { return func(c *config) { c.id = id } }

// WithPrefix sets the start of every key (default Prefix). Fleets of
// different rule sets (gateways, serve) need different prefixes. It must
// not contain '{' or '}'.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithClock sets where the time comes from (default: the system's).
func WithClock(clk ratekeeper.Clock) Option { return func(c *config) { c.clock = clk } }

// WithLogger receives the errors of publishing and of records skipped
// (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithErrors is told of each error: "publish" when a publish by Run
// failed, "record" when a record read back was skipped.
func WithErrors(f func(what string)) Option { return func(c *config) { c.onError = f } }

// WithPeriod sets how often Run publishes (default DefaultPeriod).
func WithPeriod(d time.Duration) Option { return func(c *config) { c.period = d } }

// WithTTL sets how long a summary counts (default DefaultTTL).
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithMaxInstances caps the instances a read merges per rule, the most
// recent first (default DefaultMaxInstances).
func WithMaxInstances(n int) Option { return func(c *config) { c.maxInstances = n } }

// WithMaxBytes caps a record's bytes, written or read (default
// DefaultMaxBytes).
func WithMaxBytes(n int) Option { return func(c *config) { c.maxBytes = n } }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// New returns a Fleet that publishes board's summaries to client.
func New(client redis.UniversalClient, board *topk.Board, opts ...Option) *Fleet {
	c := config{
		prefix: Prefix, clock: systemClock{}, logger: slog.New(slog.DiscardHandler), onError: func(string) {},
		period: DefaultPeriod, ttl: DefaultTTL,
		maxInstances: DefaultMaxInstances, maxBytes: DefaultMaxBytes, maxEntry: DefaultMaxEntries,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.id == "" {
		c.id = newID()
	}
	c.period, c.ttl = max(c.period, time.Millisecond), max(c.ttl, time.Millisecond)
	c.maxInstances, c.maxBytes = max(c.maxInstances, 1), max(c.maxBytes, 64)
	return &Fleet{client: client, board: board, c: c}
}

// newID is host/pid/8 random hex digits.
func newID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%.64s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// ID names this instance in the keys.
func (f *Fleet) ID() string { return f.c.id }

// TTL is how long a published summary counts.
func (f *Fleet) TTL() time.Duration { return f.c.ttl }

// Skipped counts the records read back that did not decode or broke a
// bound.
func (f *Fleet) Skipped() uint64 { return f.skipped.Load() }

// index is the key of rule's sorted set of instances; record, of one
// instance's record. Both share a hash tag, hence a Cluster slot.
func (f *Fleet) index(rule string) string {
	h := fnv.New64a()
	h.Write([]byte(rule))
	return f.c.prefix + "{" + strconv.FormatUint(h.Sum64(), 16) + "}"
}

func (f *Fleet) recordKey(rule, id, span string) string {
	return f.index(rule) + ":" + id + ":" + span
}

// Run publishes every period until ctx is done. Errors are logged; the
// next period tries again.
func (f *Fleet) Run(ctx context.Context) {
	t := time.NewTicker(f.c.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.publishWithin(ctx, f.c.period)
		}
	}
}

// Start runs Run in a goroutine until ctx is done or stop is called,
// which waits for it to end. A nil Fleet starts nothing.
func (f *Fleet) Start(ctx context.Context) (stop func()) {
	if f == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// publishWithin publishes, giving up after d, and logs an error unless
// ctx ended.
func (f *Fleet) publishWithin(ctx context.Context, d time.Duration) {
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := f.Publish(pctx); err != nil && ctx.Err() == nil {
		f.c.onError("publish")
		f.c.logger.Warn("top: cannot publish to the fleet", "err", err)
	}
}

// Publish writes the board's summaries of every rule and span, as of
// now, in one pipeline.
func (f *Fleet) Publish(ctx context.Context) error {
	now := f.c.clock.Now()
	at := now.UnixMilli()
	pipe := f.client.Pipeline()
	for _, rule := range f.board.Rules() {
		ix := f.index(rule)
		for _, span := range topk.Spans() {
			b, err := encode(f.recordOf(now, rule, span.Name), f.c.maxBytes)
			if err != nil {
				f.c.logger.Warn("top: a rule's summaries are not published", "rule", rule, "err", err)
				continue
			}
			pipe.Set(ctx, f.recordKey(rule, f.c.id, span.Name), b, f.c.ttl)
		}
		pipe.ZAdd(ctx, ix, redis.Z{Score: float64(at), Member: f.c.id})
		// Instances gone for 4 TTLs leave the index; a record's own TTL
		// decides, and the margin absorbs clocks that disagree.
		pipe.ZRemRangeByScore(ctx, ix, "-inf", "("+strconv.FormatInt(at-4*f.c.ttl.Milliseconds(), 10))
		pipe.PExpire(ctx, ix, 4*f.c.ttl)
	}
	if pipe.Len() == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}

// recordOf is the board's record of rule over span at now: each kind,
// with its error bound.
func (f *Fleet) recordOf(now time.Time, rule, span string) record {
	r := record{V: version, Rule: rule, At: now.UnixMilli()}
	k := f.board.K()
	for _, kind := range kinds() {
		t, _ := f.board.Top(now, rule, kind, span, k)
		r.Tops = append(r.Tops, part{
			Kind: kind.String(), Span: span, Bound: max(t.Bound, t.Floor),
			Summary: topk.Summary{Entries: t.Entries, Floor: t.Floor, Total: t.Total},
		})
	}
	return r
}
