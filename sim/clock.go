package sim

import (
	"sync"
	"time"
)

// virtualClock is the clock the simulated limiters read: it stands still
// until the engine moves it to the next event. A Store may read it from its
// own goroutine (the memory store's janitor), so it is locked.
type virtualClock struct {
	mu   sync.Mutex
	base time.Time
	at   time.Duration
}

// Now is the virtual instant.
func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(c.at)
}

// set moves the clock to d after its base.
func (c *virtualClock) set(d time.Duration) {
	c.mu.Lock()
	c.at = d
	c.mu.Unlock()
}
