package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Bounds of the background cancels of slots.
const (
	// maxCancels is how many cancels may wait; more are dropped, and their
	// slots, if Redis took them, expire by themselves.
	maxCancels = 1024
	// cancelTry bounds one attempt at a cancel.
	cancelTry = time.Second
	// cancelPause is the first wait after a failed attempt; it doubles up
	// to cancelTry while attempts keep failing.
	cancelPause = 10 * time.Millisecond
)

// cancels gives back, in the background, the slots of acquires that failed
// once sent. Redis may run such an acquire (its reply lost, or late for
// its caller's deadline); its slot, which no permit holds, would then stand
// for a whole TTL. A cancel frees the slot if Redis took it, and otherwise
// keeps the acquire from taking it when it runs later. Each cancel is tried
// until Redis answers it, for at most its slot's TTL. One goroutine,
// started by the first cancel and stopped by close, sends them in turn;
// the zero value is not usable: call newCancels.
type cancels struct {
	send  func(ctx context.Context, req ratekeeper.SlotRequest) error
	queue chan pendingCancel
	ctx   context.Context // ends at close
	stop  context.CancelFunc

	mu      sync.Mutex
	started bool
	done    chan struct{} // closed when the goroutine ends
}

// pendingCancel is a cancel to send, until it is no longer needed.
type pendingCancel struct {
	req   ratekeeper.SlotRequest
	until time.Time // the slot's lease, had Redis taken it then, has expired
}

// newCancels returns cancels that send each with send.
func newCancels(send func(ctx context.Context, req ratekeeper.SlotRequest) error) *cancels {
	ctx, stop := context.WithCancel(context.Background())
	return &cancels{send: send, queue: make(chan pendingCancel, maxCancels), ctx: ctx, stop: stop, done: make(chan struct{})}
}

// add queues a cancel of req's slot, unless maxCancels wait or c is closed.
func (c *cancels) add(req ratekeeper.SlotRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return
	}
	if !c.started {
		c.started = true
		go c.loop()
	}
	c.push(pendingCancel{req: req, until: time.Now().Add(req.TTL)})
}

// push queues p unless maxCancels wait.
func (c *cancels) push(p pendingCancel) {
	select {
	case c.queue <- p:
	default:
	}
}

// close stops the goroutine and waits for it; cancels not sent are dropped.
func (c *cancels) close() {
	c.mu.Lock()
	c.stop()
	started := c.started
	c.mu.Unlock()
	if started {
		<-c.done
	}
}

// loop sends the cancels in turn. One that fails goes to the back of the
// queue (another part of a Cluster may answer the next), and the loop
// pauses, longer while attempts keep failing.
func (c *cancels) loop() {
	defer close(c.done)
	pause := cancelPause
	for {
		var p pendingCancel
		select {
		case <-c.ctx.Done():
			return
		case p = <-c.queue:
		}
		if !time.Now().Before(p.until) {
			continue
		}
		if c.try(p) == nil {
			pause = cancelPause
			continue
		}
		c.push(p)
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, cancelTry)
	}
}

// try sends p once, bounded by cancelTry and p.until.
func (c *cancels) try(p pendingCancel) error {
	deadline := time.Now().Add(cancelTry)
	if p.until.Before(deadline) {
		deadline = p.until
	}
	ctx, cancel := context.WithDeadline(c.ctx, deadline)
	defer cancel()
	return c.send(ctx, p.req)
}

// cancelSlot frees slot req.ID if Redis holds it, or else keeps a later
// acquire of it from taking it, until req.TTL has passed.
func (s *Store) cancelSlot(ctx context.Context, req ratekeeper.SlotRequest) error {
	_, _, _, err := s.slots(ctx, "c", req)
	return err
}
