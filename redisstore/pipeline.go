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

	// many runs the decisions and refunds of a flush in one script run
	// (scripts/many.lua); nil on Cluster, whose keys lie on several nodes:
	// there each call is its own EVALSHA in the pipeline.
	many *redis.Script
}

// call is one script run waiting for its pipeline.
type call struct {
	ctx    context.Context
	script *redis.Script
	algo   int // algoIndex of script, or -1 if many.lua cannot run it
	keys   []string
	args   []any
	reply  string // the script's reply (every script answers a string)
	err    error
	done   chan struct{} // receives once reply or err is set (capacity 1)
}

// calls recycles the calls whose callers took their reply; a call whose
// caller gave up is left to the garbage collector, as a flusher may still
// hold it.
var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// finish hands c its reply.
func (c *call) finish() { c.done <- struct{}{} }

const (
	flushers = 4   // script runs or pipelines in flight at once (2 to 8 measured: 4 best on 2 cores)
	maxBatch = 256 // calls per pipeline
)

var errClosed = errors.New("redisstore: store is closed")

func newBatcher(client redis.UniversalClient) *batcher {
	b := &batcher{client: client, queue: make(chan *call, maxBatch*flushers), stop: make(chan struct{}), direct: honoursDeadlines(client)}
	if _, ok := client.(*redis.Client); ok {
		b.many = redis.NewScript(manySource())
	}
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
			c.err = errClosed
			c.finish()
		default:
			return
		}
	}
}

// run sends the script run in the next flush and waits for its reply.
func (b *batcher) run(ctx context.Context, s *redis.Script, algo int, keys []string, args []any) (string, error) {
	defer b.inflight.Add(-1)
	if b.inflight.Add(1) == 1 && b.direct {
		select {
		case <-b.stop:
			return "", errClosed
		default:
		}
		return s.Run(ctx, b.client, keys, args...).Text()
	}
	c := calls.Get().(*call)
	c.ctx, c.script, c.algo, c.keys, c.args = ctx, s, algo, keys, args
	select {
	case b.queue <- c:
	case <-ctx.Done():
		calls.Put(c)
		return "", ctx.Err()
	case <-b.stop:
		calls.Put(c)
		return "", errClosed
	}
	select {
	case <-c.done:
		reply, err := c.reply, c.err
		*c = call{done: c.done}
		calls.Put(c)
		return reply, err
	case <-ctx.Done():
		return "", ctx.Err()
	}
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

// exec runs batch: its decisions and refunds in one script run if many.lua
// can take them (several, on one server), the rest in one pipeline, run
// again with EVAL (which loads the script) if the server answered NOSCRIPT.
func (b *batcher) exec(batch []*call) {
	// The pipeline lives as long as the latest caller waits; callers whose
	// context is already done are not sent.
	var deadline time.Time
	bounded := true
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
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
	if b.many != nil && len(live) > 1 {
		rest := b.runMany(ctx, live)
		if len(rest) == 0 {
			return
		}
		live = rest
	}
	if len(live) == 1 { // no pipeline for one call (EVALSHA, EVAL on NOSCRIPT)
		c := live[0]
		c.reply, c.err = c.script.Run(ctx, b.client, c.keys, c.args...).Text()
		c.finish()
		return
	}
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	var again []*call
	for i, c := range live {
		c.reply, c.err = cmds[i].Text()
		if c.err != nil && strings.HasPrefix(c.err.Error(), "NOSCRIPT") {
			again = append(again, c)
			continue
		}
		c.finish()
	}
	if len(again) == 0 {
		return
	}
	pipe = b.client.Pipeline()
	for i, c := range again {
		cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range again {
		c.reply, c.err = cmds[i].Text()
		c.finish()
	}
}

// runMany runs the calls of live that many.lua can run, in one script run,
// and hands each its reply; it returns the others, in live's array.
func (b *batcher) runMany(ctx context.Context, live []*call) []*call {
	rest := live[:0]
	var group []*call
	for _, c := range live {
		if c.algo < 0 || len(c.keys) != 1 {
			rest = append(rest, c)
			continue
		}
		group = append(group, c)
	}
	if len(group) < 2 {
		return append(rest, group...)
	}
	keys := make([]string, len(group))
	args := make([]any, 0, 4*len(group))
	for i, c := range group {
		keys[i] = c.keys[0]
		args = append(args, c.algo+1)
		args = append(args, c.args...)
	}
	v, err := b.many.Run(ctx, b.client, keys, args...).Text()
	for _, c := range group {
		if err == nil {
			c.reply, c.err, v, err = nextReply(v)
		} else {
			c.err = err
		}
		c.finish()
	}
	return rest
}

// serverError is an error the server answered one call of many.lua: a
// redis.Error, as go-redis would return for the call alone.
type serverError string

func (e serverError) Error() string { return string(e) }

// RedisError marks e as the server's (redis.Error).
func (e serverError) RedisError() {}

var _ redis.Error = serverError("")

// errManyReply is a reply of many.lua that does not parse.
var errManyReply = errors.New("redisstore: many.lua: malformed reply")

// nextReply splits v, many.lua's reply, into the first call's reply or
// error and the rest: a byte, 'o' or 'e', a 4-byte little-endian length and
// that many bytes. err is for a malformed v (every later call fails too).
func nextReply(v string) (reply string, callErr error, rest string, err error) {
	if len(v) < 5 {
		return "", nil, "", errManyReply
	}
	n := int(v[1]) | int(v[2])<<8 | int(v[3])<<16 | int(v[4])<<24
	if len(v) < 5+n {
		return "", nil, "", errManyReply
	}
	body, rest := v[5:5+n], v[5+n:]
	switch v[0] {
	case 'o':
		return body, nil, rest, nil
	case 'e':
		return "", serverError(body), rest, nil
	}
	return "", nil, "", errManyReply
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
