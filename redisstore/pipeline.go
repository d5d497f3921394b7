package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces concurrent script runs into pipelines: each of a few
// flushers takes whatever calls are queued, sends them in one round trip
// and hands each caller its reply. A caller waits for its reply or its
// context, whichever comes first, so a hung server never holds a caller past
// its deadline (go-redis's own autopipeliner waits out the batch).
type batcher struct {
	client redis.UniversalClient
	queue  chan *call
	stop   chan struct{}
	wg     sync.WaitGroup

	// inflight counts the calls between run's start and its reply. A call
	// that finds none in flight is alone: it goes straight to the client,
	// sparing the hand-off to a flusher and back, if direct says the
	// client honours context deadlines.
	inflight atomic.Int32
	direct   bool
}

// call is one script run waiting for its pipeline.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{} // receives once cmd holds the reply (capacity 1)
}

// calls recycles the calls whose callers took their reply; a call whose
// caller gave up is left to the garbage collector, as a flusher may still
// hold it.
var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// finish hands c its reply.
func (c *call) finish() { c.done <- struct{}{} }

const (
	flushers = 2   // pipelines in flight at once
	maxBatch = 256 // calls per pipeline
)

var errClosed = errors.New("redisstore: store is closed")

func newBatcher(client redis.UniversalClient) *batcher {
	b := &batcher{client: client, queue: make(chan *call, maxBatch*flushers), stop: make(chan struct{}), direct: honoursDeadlines(client)}
	b.wg.Add(flushers)
	for range flushers {
		go b.flusher()
	}
	return b
}

// close stops the flushers; calls still queued get errClosed.
func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
	for {
		select {
		case c := <-b.queue:
			c.cmd = errCmd(c.ctx, errClosed)
			c.finish()
		default:
			return
		}
	}
}

// run sends the script run in the next pipeline and waits for its reply.
func (b *batcher) run(ctx context.Context, s *redis.Script, keys []string, args []any) *redis.Cmd {
	defer b.inflight.Add(-1)
	if b.inflight.Add(1) == 1 && b.direct {
		select {
		case <-b.stop:
			return errCmd(ctx, errClosed)
		default:
		}
		return s.Run(ctx, b.client, keys, args...)
	}
	c := calls.Get().(*call)
	c.ctx, c.script, c.keys, c.args = ctx, s, keys, args
	select {
	case b.queue <- c:
	case <-ctx.Done():
		calls.Put(c)
		return errCmd(ctx, ctx.Err())
	case <-b.stop:
		calls.Put(c)
		return errCmd(ctx, errClosed)
	}
	select {
	case <-c.done:
		cmd := c.cmd
		*c = call{done: c.done}
		calls.Put(c)
		return cmd
	case <-ctx.Done():
		return errCmd(ctx, ctx.Err())
	}
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

func (b *batcher) flusher() {
	defer b.wg.Done()
	batch := make([]*call, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case c := <-b.queue:
			batch = append(batch, c)
		case <-b.stop:
			return
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		b.exec(batch)
	}
}

// exec runs batch in one pipeline, then runs again with EVAL (which loads
// the script) the calls the server answered NOSCRIPT.
func (b *batcher) exec(batch []*call) {
	// The pipeline lives as long as the latest caller waits; callers whose
	// context is already done are not sent.
	var deadline time.Time
	bounded := true
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = errCmd(c.ctx, err)
			c.finish()
			continue
		}
		if d, ok := c.ctx.Deadline(); ok {
			if d.After(deadline) {
				deadline = d
			}
		} else {
			bounded = false
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	pipe := b.client.Pipeline()
	for _, c := range live {
		c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	var again []*call
	for _, c := range live {
		if err := c.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			again = append(again, c)
			continue
		}
		c.finish()
	}
	if len(again) == 0 {
		return
	}
	pipe = b.client.Pipeline()
	for _, c := range again {
		c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range again {
		c.finish()
	}
}

// honoursDeadlines reports whether client bounds its commands by their
// context's deadline.
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}
