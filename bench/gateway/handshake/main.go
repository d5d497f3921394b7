// Command handshake measures new TLS connections: each of -conns workers
// dials, handshakes, sends one HTTP/1.1 request with "Connection: close",
// reads the answer to its end and closes, again and again for -duration.
// It reports connections per second and the latency of each (dial to last
// byte).
//
// Every handshake is a full one, where the server signs with its
// certificate's key, unless -resume. With -resume a session cache lets a
// connection resume an earlier one's session: in TLS 1.3 a PSK with a fresh
// key exchange, no certificate and no signature. Runs of wrk with
// "Connection: close" measure only this second kind: wrk always resumes,
// keeping its session across reconnects.
//
// The client offers X25519 alone, as OpenSSL 3.0's clients do, and
// "http/1.1" by ALPN. Go's default would offer X25519MLKEM768 first, which
// a Go server takes and nginx on OpenSSL 3.0 cannot.
// Like wrk it leaves the certificate chain unchecked: on a shared machine
// the client's work is taken from the servers'.
package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "server address")
	path := flag.String("path", "/v1/items/7", "request path")
	conns := flag.Int("conns", 64, "workers, each with one connection at a time")
	dur := flag.Duration("duration", 5*time.Second, "how long to connect")
	resume := flag.Bool("resume", false, "resume sessions instead of full handshakes")
	flag.Parse()

	cfg := &tls.Config{
		ServerName:         "localhost",
		InsecureSkipVerify: true,
		CurvePreferences:   []tls.CurveID{tls.X25519},
		NextProtos:         []string{"http/1.1"},
	}
	if *resume {
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(*conns)
	}
	req := []byte("GET " + *path + " HTTP/1.1\r\nHost: " + *addr + "\r\nConnection: close\r\n\r\n")
	deadline := time.Now().Add(*dur)
	var (
		mu              sync.Mutex
		lat             []time.Duration
		failed, resumed int
		firstErr        error
		wg              sync.WaitGroup
	)
	start := time.Now()
	for range *conns {
		wg.Go(func() {
			var local []time.Duration
			bad, again := 0, 0
			var err0 error
			for time.Now().Before(deadline) {
				t0 := time.Now()
				r, err := once(*addr, cfg, req)
				if err != nil {
					bad++
					if err0 == nil {
						err0 = err
					}
					continue
				}
				if r {
					again++
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			failed += bad
			resumed += again
			if firstErr == nil {
				firstErr = err0
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(lat) == 0 {
		fmt.Fprintln(os.Stderr, "handshake: no connection succeeded:", firstErr)
		os.Exit(1)
	}
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "handshake: first failure:", firstErr)
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	fmt.Printf("connections %d in %.2fs: %.1f/s, resumed %d, failed %d, p50 %.3f ms, p99 %.3f ms\n",
		len(lat), elapsed.Seconds(), float64(len(lat))/elapsed.Seconds(), resumed, failed, q(0.50), q(0.99))
}

// once makes one connection and one request on it, and reports whether
// the handshake resumed a session.
func once(addr string, cfg *tls.Config, req []byte) (bool, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(nc, cfg)
	if err := c.Handshake(); err != nil {
		return false, err
	}
	if _, err := c.Write(req); err != nil {
		return false, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("status %d", resp.StatusCode)
	}
	return c.ConnectionState().DidResume, nil
}
