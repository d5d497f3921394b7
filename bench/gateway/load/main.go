// Command load sends requests at a fixed rate over a fixed number of
// connections and reports latency percentiles. By contrast, wrk runs
// closed-loop at full speed, where a saturated proxy's latency is only its
// queue. At a fixed rate below saturation, the difference between
// contenders is what each adds.
// Latency is measured from each request's scheduled send time, so a stall
// counts against the contender (no coordinated omission).
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18081/v1/items/7", "target URL")
	rate := flag.Int("rate", 2000, "requests per second")
	conns := flag.Int("conns", 64, "connections (and workers)")
	dur := flag.Duration("duration", 10*time.Second, "how long to send")
	header := flag.String("user", "alice", "X-User-ID header value")
	flag.Parse()

	tr := &http.Transport{MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns, DisableCompression: true}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	n := int(dur.Seconds() * float64(*rate))
	sched := make(chan time.Time, n)
	lat := make([]time.Duration, 0, n)
	var mu sync.Mutex
	var failed int
	var wg sync.WaitGroup
	for range *conns {
		wg.Go(func() {
			local := make([]time.Duration, 0, n / *conns + 1)
			bad := 0
			for at := range sched {
				req, _ := http.NewRequest(http.MethodGet, *url, nil)
				req.Header.Set("X-User-ID", *header)
				resp, err := client.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != 200 {
					bad++
					continue
				}
				local = append(local, time.Since(at))
			}
			mu.Lock()
			lat = append(lat, local...)
			failed += bad
			mu.Unlock()
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(*rate)
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		sched <- at
	}
	close(sched)
	wg.Wait()
	elapsed := time.Since(start)
	if len(lat) == 0 {
		fmt.Fprintln(os.Stderr, "load: no successful requests")
		os.Exit(1)
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	fmt.Printf("sent %d in %.1fs (%.0f/s), failed %d, p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms\n",
		n, elapsed.Seconds(), float64(n)/elapsed.Seconds(), failed, q(0.50), q(0.99), q(0.999))
}
