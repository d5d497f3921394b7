package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// job is one script run. With algo >= 0 it is a decision or refund on one
// key, whose arguments the pipeliner packs as the script or many.lua wants
// them. With algo < 0 it is TakeAll's batch script, with its keys and args
// as given.
type job struct {
	script *redis.Script
	algo   int // algoIndex, or -1
	key    string
	op     byte
	n      int
	now    time.Time // zero: the server's TIME
	limit  *limitArg
	x8     int64 // refunds (op r or c) only
	keys   []string
	args   []any
}

// refund reports whether j takes a third argument, x8: a refund, or a
// shared mode's add or lease.
func (j *job) refund() bool { return j.op == 'r' || j.op == 'c' || j.op == 'a' || j.op == 'l' }

// givesBack reports whether j gives back what was taken: a refund, or a
// shared mode's negative count (a refund synced late, a lease's unused
// quota). Run twice, it gives back twice, and admits past the limit; a
// decision or a positive count run twice only counts more.
func (j *job) givesBack() bool { return j.op == 'r' || j.op == 'c' || (j.op == 'a' && j.n < 0) }

// run sends j alone: one EVALSHA (EVAL if the server answers NOSCRIPT).
func (j *job) run(ctx context.Context, c redis.UniversalClient) (string, error) {
	return j.script.Run(ctx, j.via(c), j.keyList(), j.argList()...).Text()
}

// evalSha queues j on pipe as an EVALSHA.
func (j *job) evalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	return j.script.EvalSha(ctx, j.via(pipe), j.keyList(), j.argList()...)
}

// eval queues j on pipe as an EVAL.
func (j *job) eval(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	return j.script.Eval(ctx, j.via(pipe), j.keyList(), j.argList()...)
}

// via is c, through which j's script runs: sent once if j gives back.
func (j *job) via(c scripter) redis.Scripter {
	if j.givesBack() {
		return once{c}
	}
	return c
}

// scripter is a client or a pipeline, which runs scripts.
type scripter interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// once is a scripter whose EVAL and EVALSHA commands go-redis does not
// send again after a failure, as it does other commands (up to
// MaxRetries). The failure may have come after the server ran the script,
// as when a connection breaks before the reply. go-redis still sends them
// again when it knows they were not written (its "forced" retry). A pooled
// connection found dead is replaced before the write, which is no failure.
// A failed dial is not retried: the give-back is then lost, which only
// over-counts. In a pipeline, one such command keeps go-redis from sending
// any of the pipeline's commands again.
type once struct{ scripter }

func (o once) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval", script, keys, args)
}

func (o once) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha", sha1, keys, args)
}

// eval sends the command name (eval or evalsha) of script (its source or
// hash) on keys with args, as go-redis's Eval and EvalSha make it, as a
// noRetryCmd.
func (o once) eval(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // where a Cluster client finds the slot
	}
	_ = o.Process(ctx, noRetryCmd{cmd})
	return cmd
}

// noRetryCmd is a command that go-redis does not send again once it may
// have been written (see once).
type noRetryCmd struct{ *redis.Cmd }

// NoRetry is true: see noRetryCmd.
func (noRetryCmd) NoRetry() bool { return true }

func (j *job) keyList() []string {
	if j.algo < 0 {
		return j.keys
	}
	return []string{j.key}
}

// argList is the script's ARGV (scripts/prelude.lua).
func (j *job) argList() []any {
	if j.algo < 0 {
		return j.args
	}
	if j.refund() {
		return []any{callArg(j.op, j.n, j.now), j.limit.boxed, strconv.FormatInt(j.x8, 10)}
	}
	return []any{callArg(j.op, j.n, j.now), j.limit.boxed}
}

// appendRecord appends j's record for many.lua: '<Bc1ddddddd', the
// algorithm's index from 1, op, n, now, the limit (32 bytes, '<dddd'), x8
// (NaN for a decision), and a calendar window's boundaries.
func (j *job) appendRecord(b []byte) []byte {
	b = append(b, byte(j.algo+1), j.op)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(j.n)))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(nowFloat(j.now)))
	b = append(b, j.limit.packed[:32]...)
	x8 := math.NaN()
	if j.refund() {
		x8 = float64(j.x8)
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x8))
	return append(b, j.limit.packed[32:]...) // a calendar window's boundaries
}

// batcher coalesces concurrent script runs. Callers add their calls to a
// pending batch, and a batch goes to one of a few flushers. A flusher sends
// it in one round trip (one run of many.lua on a standalone server, a
// pipeline on Cluster) and hands each caller its reply. A caller waits for
// its reply or its context, whichever comes first, so a hung server never
// holds a caller past its deadline.
//
// When a batch goes is what makes it cheap: each round trip costs the client
// and the server about as much as a dozen decisions inside it. A batch goes
// once it holds one of these:
//
//   - half the callers waiting for a reply;
//   - every caller not waiting on a batch already sent (no more calls can
//     come before a reply);
//   - maxBatch calls.
//
// It goes only while fewer than flushers batches are in flight. A batch's
// callers count as back once its reply arrives, before they are woken. So
// under a steady load the callers of one reply make the next batch. Two
// batches are in flight, each of half the callers: one on the server while
// the other's callers decide and come back. A lone caller goes at once
// (straight to the server, without a flusher, when nothing else is
// pending).
type batcher struct {
	client redis.UniversalClient
	addr   string        // the Cluster primary it sends to; "" if go-redis routes
	direct bool          // client bounds commands by their context's deadline
	ready  chan []*call  // batches for the flushers; never more than flushers
	stop   chan struct{} // closed by close
	wg     sync.WaitGroup

	// many runs the decisions and refunds of a flush in one script run
	// (scripts/many.lua); nil on Cluster, whose keys lie on several nodes:
	// there each call is its own EVALSHA in the pipeline.
	many *redis.Script

	// calls recycles the calls whose callers took their reply; a call
	// whose caller gave up is left to the garbage collector, as a flusher
	// may still hold it.
	calls sync.Pool

	mu      sync.Mutex
	closed  bool
	callers int       // callers in run
	sent    int       // calls in batches whose reply has not come back
	flights int       // batches handed to flushers whose reply has not come back
	pending []*call   // the batch filling
	spares  [][]*call // empty batches to fill next
}

// call is one job waiting for its flush.
type call struct {
	job
	ctx      context.Context
	deadline time.Time // the call's own bound besides ctx's (zero: none)
	reply    string    // the script's reply (every script answers a string)
	err      error
	done     chan struct{} // receives once reply or err is set (capacity 1)
}

// getCall returns a recycled call or a new one.
func (b *batcher) getCall() *call {
	if c, ok := b.calls.Get().(*call); ok {
		return c
	}
	return &call{done: make(chan struct{}, 1)}
}

// finish hands c its reply.
func (c *call) finish() { c.done <- struct{}{} }

const (
	flushers = 2   // batches in flight at most (2 and 4 measured: 2 best on 2 cores)
	maxBatch = 256 // calls per batch
)

var errClosed = errors.New("redisstore: store is closed")

func newBatcher(client redis.UniversalClient, addr string) *batcher {
	b := &batcher{
		client: client,
		addr:   addr,
		direct: honoursDeadlines(client),
		ready:  make(chan []*call, flushers),
		stop:   make(chan struct{}),
	}
	if _, ok := client.(*redis.Client); ok {
		b.many = redis.NewScript(manySource())
	}
	b.wg.Add(flushers)
	for range flushers {
		go b.flusher()
	}
	return b
}

// close stops the flushers once their batches are answered; calls pending
// or not yet taken by a flusher get errClosed.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	var left []*call
	left = append(left, b.pending...)
	b.pending = nil
	for more := true; more; {
		select {
		case batch := <-b.ready:
			left = append(left, batch...)
		default:
			more = false
		}
	}
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
	for _, c := range left {
		c.err = errClosed
		c.finish()
	}
}

// run sends j in the next batch and waits for its reply, at most until
// ctx is done or deadline (if not zero) has passed. The deadline costs no
// context of its own when the client honours deadlines: the round trip of
// its batch ends by then, and with it the wait.
func (b *batcher) run(ctx context.Context, j job, deadline time.Time) (string, error) {
	if !deadline.IsZero() && !b.direct {
		// A round trip may outlast the deadline: the wait needs a timer.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		deadline = time.Time{}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return "", errClosed
	}
	b.callers++
	if b.callers == 1 && b.direct && len(b.pending) == 0 {
		// Alone: straight to the server, sparing the hand-off to a
		// flusher and back.
		b.mu.Unlock()
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		reply, err := j.run(ctx, b.client)
		b.leave()
		return reply, err
	}
	c := b.getCall()
	c.job, c.ctx, c.deadline = j, ctx, deadline
	b.pending = append(b.pending, c)
	b.dispatch()
	b.mu.Unlock()
	select {
	case <-c.done:
		reply, err := c.reply, c.err
		*c = call{done: c.done}
		b.calls.Put(c)
		b.leave()
		return reply, err
	case <-ctx.Done():
		b.leave()
		return "", ctx.Err()
	}
}

// runAll sends jobs in the next batches, as one caller each, and waits for
// their replies, each at most until ctx is done. A job not answered by then
// gets ctx's error, and the others keep their replies (on a Cluster, the
// calls to primaries that answered).
func (b *batcher) runAll(ctx context.Context, jobs []job) ([]string, []error) {
	replies := make([]string, len(jobs))
	errs := make([]error, len(jobs))
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		for i := range errs {
			errs[i] = errClosed
		}
		return replies, errs
	}
	b.callers += len(jobs)
	cs := make([]*call, len(jobs))
	for i := range jobs {
		c := b.getCall()
		c.job, c.ctx = jobs[i], ctx
		cs[i] = c
		b.pending = append(b.pending, c)
	}
	b.dispatch()
	b.mu.Unlock()
	for i, c := range cs {
		select {
		case <-c.done:
		case <-ctx.Done():
			select {
			case <-c.done:
			default:
				errs[i] = ctx.Err()
				b.leave()
				continue // c may still be in a flush: not recycled
			}
		}
		replies[i], errs[i] = c.reply, c.err
		*c = call{done: c.done}
		b.calls.Put(c)
		b.leave()
	}
	return replies, errs
}

// leave counts a caller out of run, which may make the pending batch ready.
func (b *batcher) leave() {
	b.mu.Lock()
	b.callers--
	b.dispatch()
	b.mu.Unlock()
}

// dispatch hands the pending batch to the flushers if it should go (see
// batcher). b.mu is held; the send never blocks, as at most flushers
// batches are in flight.
func (b *batcher) dispatch() {
	q := len(b.pending)
	if q == 0 || b.flights == flushers || b.closed {
		return
	}
	if q < maxBatch && 2*q < b.callers && q < b.callers-b.sent {
		return
	}
	n := min(q, maxBatch)
	batch := b.pending[:n:n]
	var next []*call
	if k := len(b.spares); k > 0 {
		next, b.spares = b.spares[k-1], b.spares[:k-1]
	}
	b.pending = append(next, b.pending[n:]...)
	b.sent += n
	b.flights++
	b.ready <- batch
}

// answered counts batch as back from the server, before its callers get
// their replies, so that the batch filling meanwhile can go; batch's array
// is reused for a later batch.
func (b *batcher) answered(batch []*call) {
	b.mu.Lock()
	b.sent -= len(batch)
	b.flights--
	if len(b.spares) < flushers {
		clear(batch)
		b.spares = append(b.spares, batch[:0])
	}
	b.dispatch()
	b.mu.Unlock()
}

// flush is a flusher's scratch space, kept from batch to batch.
type flush struct {
	calls []*call // the batch, whose callers get their replies at the end
	live  []*call // the calls sent
	buf   []byte  // many.lua's argument
}

func (b *batcher) flusher() {
	defer b.wg.Done()
	var f flush
	for {
		select {
		case batch := <-b.ready:
			f.calls = append(f.calls[:0], batch...)
			b.exec(&f)
			b.answered(batch)
			for _, c := range f.calls {
				c.finish()
			}
			clear(f.calls)
		case <-b.stop:
			return
		}
	}
}

// exec runs f.calls and sets each one's reply. Their decisions and refunds
// go in one script run if many.lua can take them (several, on one server).
// The rest go in one pipeline, run again with EVAL (which loads the script)
// if the server answered NOSCRIPT.
func (b *batcher) exec(f *flush) {
	// The round trip lives as long as the latest caller waits; callers
	// whose context is already done are not sent.
	var deadline, now time.Time
	bounded := true
	live := f.live[:0]
	for _, c := range f.calls {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			continue
		}
		d, ok := c.ctx.Deadline()
		if !c.deadline.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			if !now.Before(c.deadline) {
				c.err = context.DeadlineExceeded
				continue
			}
			if !ok || c.deadline.Before(d) {
				d, ok = c.deadline, true
			}
		}
		if ok {
			if d.After(deadline) {
				deadline = d
			}
		} else {
			bounded = false
		}
		live = append(live, c)
	}
	f.live = live
	defer clear(f.live)
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
		live = b.runMany(ctx, live, f)
	}
	switch len(live) {
	case 0:
		return
	case 1: // no pipeline for one call (EVALSHA, EVAL on NOSCRIPT)
		c := live[0]
		c.reply, c.err = c.job.run(ctx, b.client)
		return
	}
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		cmds[i] = c.evalSha(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx)
	var again []*call
	for i, c := range live {
		c.reply, c.err = cmds[i].Text()
		if c.err != nil && strings.HasPrefix(c.err.Error(), "NOSCRIPT") {
			again = append(again, c)
		}
	}
	if len(again) == 0 {
		return
	}
	pipe = b.client.Pipeline()
	for i, c := range again {
		cmds[i] = c.eval(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range again {
		c.reply, c.err = cmds[i].Text()
	}
}

// runMany runs the calls of live that many.lua can run, in one script run,
// and sets each one's reply; it returns the others.
func (b *batcher) runMany(ctx context.Context, live []*call, f *flush) []*call {
	var rest []*call
	keys := make([]string, 0, len(live))
	f.buf = f.buf[:0]
	givesBack := false
	for _, c := range live {
		if c.algo < 0 {
			rest = append(rest, c)
			continue
		}
		keys = append(keys, c.key)
		f.buf = c.appendRecord(f.buf)
		givesBack = givesBack || c.givesBack()
	}
	if len(keys) < 2 {
		return live // not worth many.lua
	}
	var sc redis.Scripter = b.client
	if givesBack {
		sc = once{b.client} // the decisions of the run are not sent again either
	}
	v, err := b.many.Run(ctx, sc, keys, f.buf).Text()
	for _, c := range live {
		if c.algo < 0 {
			continue
		}
		if err == nil {
			c.reply, c.err, v, err = nextReply(v)
		} else {
			c.err = err
		}
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
// error and the rest. A reply is 'd' and a 48-byte decision, or 'r' (a
// refund's empty reply). Else it is 'o' (a reply) or 'e' (an error), a
// 4-byte little-endian length and that many bytes. err is for a malformed v (every later call fails
// too).
func nextReply(v string) (reply string, callErr error, rest string, err error) {
	if len(v) == 0 {
		return "", nil, "", errManyReply
	}
	switch v[0] {
	case 'd':
		if len(v) < 1+decisionSize {
			return "", nil, "", errManyReply
		}
		return v[1 : 1+decisionSize], nil, v[1+decisionSize:], nil
	case 'r':
		return "", nil, v[1:], nil
	}
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
