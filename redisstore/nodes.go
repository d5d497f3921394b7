package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipes hands each call to a batcher. A standalone or Sentinel-managed
// server has one. On a Cluster, each primary has its own, which takes the
// calls on the keys it holds. A primary that does not answer then holds its
// own calls only, not those batched beside them.
//
// A batcher whose address is no longer a primary's (its replica took
// over) is retired: its calls not yet sent get errClosed and go again to
// the primary that holds their key now.
type pipes struct {
	cluster *redis.ClusterClient // nil: not a Cluster
	// one takes every call when the client is not a Cluster's, and on a
	// Cluster the calls whose primary is not known (go-redis then routes
	// them itself).
	one *batcher

	nodes   sync.Map // a primary's address → *batcher
	mu      sync.Mutex
	closed  bool        // guarded by mu, as is adding to nodes
	pruning atomic.Bool // a prune is running
	pruned  sync.WaitGroup
	ctx     context.Context // done once close is called
	cancel  context.CancelFunc
	// masters lists the primaries' addresses (nil: not a Cluster). A
	// variable so that tests can retire a batcher at will.
	masters func(ctx context.Context) (map[string]bool, error)
	// answered is told of each call Redis answered, with its batcher's
	// address ("" for one's).
	answered func(addr string)
}

func newPipes(client redis.UniversalClient, answered func(addr string)) *pipes {
	p := &pipes{one: newBatcher(client, ""), answered: answered}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if c, ok := client.(*redis.ClusterClient); ok {
		p.cluster = c
		p.masters = func(ctx context.Context) (map[string]bool, error) {
			var mu sync.Mutex
			addrs := map[string]bool{}
			err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
				mu.Lock()
				addrs[m.Options().Addr] = true
				mu.Unlock()
				return nil
			})
			return addrs, err
		}
		p.pruned.Add(1)
		go p.prunes()
	}
	return p
}

// pruneEvery is how often the batchers are pruned besides when a primary
// is new. A primary can also go without another coming (a Cluster scaled
// in), and its batcher would keep its flushers for the store's life.
const pruneEvery = 10 * time.Second

// prunes prunes every pruneEvery until close.
func (p *pipes) prunes() {
	defer p.pruned.Done()
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		if !p.closed {
			p.prune()
		}
		p.mu.Unlock()
	}
}

// noLoad is a done context. MasterForKey given it answers from the slots
// the client holds. When it holds none yet, it fails at once instead of
// loading them. Loading would send CLUSTER SLOTS to each node in turn,
// bounded by the context alone, not by a TakeBy deadline. The call then
// goes through p.one, whose round trip loads the slots within the call's
// bound.
var noLoad = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// retries bounds how often a call goes again after its batcher was retired
// under it; then it goes through the batcher of unknown primaries.
const retries = 3

// run runs j in the batcher of its key's primary (see batcher.run).
func (p *pipes) run(ctx context.Context, j job, deadline time.Time) (string, error) {
	for try := 0; ; try++ {
		b := p.one
		if try < retries {
			b = p.batcherFor(j.routeKey())
		}
		reply, err := b.run(ctx, j, deadline)
		if err == nil {
			p.answered(b.addr)
			return reply, nil
		}
		if b == p.one || !errors.Is(err, errClosed) {
			return reply, err
		}
	}
}

// runAll runs jobs, each in the batcher of its key's primary, and waits
// for all of their replies (see batcher.runAll).
func (p *pipes) runAll(ctx context.Context, jobs []job) ([]string, []error) {
	if p.cluster == nil {
		replies, errs := p.one.runAll(ctx, jobs)
		p.answeredAll(p.one, errs)
		return replies, errs
	}
	replies := make([]string, len(jobs))
	errs := make([]error, len(jobs))
	if len(jobs) == 1 {
		replies[0], errs[0] = p.run(ctx, jobs[0], time.Time{})
		return replies, errs
	}
	groups := map[*batcher][]int{}
	for i := range jobs {
		b := p.batcherFor(jobs[i].routeKey())
		groups[b] = append(groups[b], i)
	}
	var wg sync.WaitGroup
	for b, idx := range groups {
		wg.Go(func() {
			mine := make([]job, len(idx))
			for k, i := range idx {
				mine[k] = jobs[i]
			}
			r, e := b.runAll(ctx, mine)
			p.answeredAll(b, e)
			for k, i := range idx {
				replies[i], errs[i] = r[k], e[k]
				if b != p.one && errors.Is(e[k], errClosed) {
					// Retired before it was sent: to the key's primary now.
					replies[i], errs[i] = p.run(ctx, jobs[i], time.Time{})
				}
			}
		})
	}
	wg.Wait()
	return replies, errs
}

// answeredAll reports b's address answered if every one of a call's
// jobs there has its reply (errs).
func (p *pipes) answeredAll(b *batcher, errs []error) {
	for _, err := range errs {
		if err != nil {
			return
		}
	}
	if len(errs) > 0 {
		p.answered(b.addr)
	}
}

// routeKey is the key that places j on a Cluster's primary.
func (j *job) routeKey() string {
	if j.algo < 0 {
		if len(j.keys) == 0 {
			return ""
		}
		return j.keys[0]
	}
	return j.key
}

// batcherFor is the batcher of the primary that holds key now, made on
// first use; p.one if that primary is not known (the client holds no
// slots yet) or the store is closed.
func (p *pipes) batcherFor(key string) *batcher {
	if p.cluster == nil || key == "" {
		return p.one
	}
	m, err := p.cluster.MasterForKey(noLoad, key)
	if err != nil {
		return p.one
	}
	addr := m.Options().Addr
	if b, ok := p.nodes.Load(addr); ok {
		return b.(*batcher)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return p.one
	}
	if b, ok := p.nodes.Load(addr); ok {
		return b.(*batcher)
	}
	b := newBatcher(p.cluster, addr)
	p.nodes.Store(addr, b)
	// A new primary: one may have gone.
	p.prune()
	return b
}

// prune retires, in the background, the batchers whose address no longer
// is a primary's, unless a prune is running already: when a batcher is
// made for a new primary, and every pruneEvery. p.mu is held.
func (p *pipes) prune() {
	if p.masters == nil || !p.pruning.CompareAndSwap(false, true) {
		return
	}
	p.pruned.Add(1)
	go func() {
		defer p.pruned.Done()
		defer p.pruning.Store(false)
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		masters, err := p.masters(ctx)
		cancel()
		if err != nil {
			return // the next new primary tries again
		}
		p.nodes.Range(func(k, v any) bool {
			if !masters[k.(string)] {
				p.retire(k.(string), v.(*batcher))
			}
			return true
		})
	}()
}

// retire takes b out of use and closes it: its calls not yet sent get
// errClosed, which run takes as a sign to go again.
func (p *pipes) retire(addr string, b *batcher) {
	p.mu.Lock()
	gone := !p.closed && p.nodes.CompareAndDelete(addr, b)
	p.mu.Unlock()
	if gone { // else retired already, or close closes it
		b.close()
	}
}

// close closes every batcher once their batches are answered.
func (p *pipes) close() {
	p.mu.Lock()
	p.closed = true
	var all []*batcher
	p.nodes.Range(func(k, v any) bool {
		all = append(all, v.(*batcher))
		p.nodes.Delete(k)
		return true
	})
	p.mu.Unlock()
	p.cancel()
	p.pruned.Wait() // a prune retires nothing now, and ends
	for _, b := range all {
		b.close()
	}
	p.one.close()
}
