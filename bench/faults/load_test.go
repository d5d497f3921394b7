package faults

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The load: open loop (requests leave on a schedule whatever the answers
// take, as real clients' do), above the limits: the hot key at three times
// its limit spread over the gateways, ten cold keys near theirs, and
// serve's JSON API at twice its limit.
const (
	tick        = 10 * time.Millisecond
	hotPerTick  = 3 // 300/s, limit 100/s
	coldKeys    = 10
	coldPerKey  = 15 // per second, limit 20/s: refused only when windows bunch
	servePerSec = 100
)

// Request kinds.
const (
	kindHot = iota
	kindCold
	kindServe
	// kindControl goes to a path no rule matches: the gateway forwards it
	// without a store call, so its latency is what the machine adds.
	kindControl
)

// sample is one request's outcome.
type sample struct {
	at      time.Duration // sent, since the run began
	done    time.Duration // answered, since the run began
	lat     time.Duration
	kind    uint8
	status  int // 0: failed
	retried bool
	err     string
	gateway int8 // the index of the gateway that answered, -1 for serve
	// limit is the answer's X-RateLimit-Limit: a gateway's local
	// fallback reports its share of the burst, Redis the whole burst.
	limit int16
}

// load sends requests to the fleet until stopped, and records them.
type load struct {
	f      *fleet
	start  time.Time
	client *http.Client
	next   atomic.Uint64 // round robin
	down   sync.Map      // *proc the balancer no longer sends to

	mu      sync.Mutex
	samples []sample
	wg      sync.WaitGroup
	stop    chan struct{}
	stopped chan struct{}
}

func startLoad(f *fleet, start time.Time) *load {
	l := &load{
		f:     f,
		start: start,
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second,
		}},
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go l.run()
	return l
}

func (l *load) run() {
	defer close(l.stopped)
	t := time.NewTicker(tick)
	defer t.Stop()
	var n int
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		n++
		for range hotPerTick {
			l.send(kindHot, "/hot/x", "hot")
		}
		// Cold keys, each coldPerKey a second.
		for k := range coldKeys {
			if (n*coldPerKey+k*7)/100 != ((n-1)*coldPerKey+k*7)/100 {
				l.send(kindCold, "/cold/x", fmt.Sprintf("cold-%d", k))
			}
		}
		if n*servePerSec/100 != (n-1)*servePerSec/100 {
			l.send(kindServe, "", "hot")
		}
		l.send(kindControl, "/free/x", "")
	}
}

// send fires one request in the background.
func (l *load) send(kind uint8, path, key string) {
	l.wg.Add(1)
	at := time.Since(l.start)
	go func() {
		defer l.wg.Done()
		s := sample{at: at, kind: kind}
		t0 := time.Now()
		s.status, s.retried, s.err, s.gateway, s.limit = l.do(kind, path, key)
		s.lat = time.Since(t0)
		s.done = time.Since(l.start)
		l.mu.Lock()
		l.samples = append(l.samples, s)
		l.mu.Unlock()
	}()
}

// do sends the request as a load balancer would: to the next gateway it
// believes up, once more to another if the connection fails before an
// answer (a gateway killed with the request in flight, or before the
// balancer's health check saw it go).
func (l *load) do(kind uint8, path, key string) (status int, retried bool, errText string, gateway int8, limit int16) {
	var failed *proc
	gateway = -1
	for attempt := range 2 {
		var req *http.Request
		if kind == kindServe {
			body := fmt.Sprintf(`{"domain":"faults","descriptors":[{"entries":[{"key":"api_key","value":%q}]}]}`, key)
			req, _ = http.NewRequest("POST", "http://"+l.f.serve.listen+"/v1/check", bytes.NewReader([]byte(body)))
		} else {
			p := l.pick(failed)
			failed = p
			gateway = int8(slices.Index(l.f.proxies, p))
			req, _ = http.NewRequest("GET", "http://"+p.listen+path, nil)
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := l.client.Do(req)
		if err != nil {
			if attempt == 0 && kind != kindServe && !errors.Is(err, http.ErrHandlerTimeout) {
				retried = true
				continue
			}
			return 0, retried, err.Error(), gateway, 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Limit"))
		return resp.StatusCode, retried, "", gateway, int16(n)
	}
	return 0, retried, "unreachable", gateway, 0
}

// pick is the next gateway the balancer believes up, other than not (the
// one a retry's first attempt failed on: with the rotation shared by every
// request in flight, the retry could otherwise land on it again; a run of
// gateway-restart failed 2 of 7,435 requests so).
func (l *load) pick(not *proc) *proc {
	ps := l.f.proxies
	for range 2 * len(ps) {
		p := ps[l.next.Add(1)%uint64(len(ps))]
		if _, down := l.down.Load(p); !down && p != not {
			return p
		}
	}
	return ps[0]
}

// drain takes p out of the balancer (as a failed health check would) and
// back in.
func (l *load) drain(p *proc, out bool) {
	if out {
		l.down.Store(p, true)
	} else {
		l.down.Delete(p)
	}
}

// finish stops sending, waits for every answer, and returns the samples.
func (l *load) finish() []sample {
	close(l.stop)
	<-l.stopped
	l.wg.Wait()
	l.client.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}
