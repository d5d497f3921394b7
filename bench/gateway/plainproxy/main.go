// Command plainproxy is httputil.ReverseProxy with nothing in front. It is
// set up as the gateway sets up its own, with the same transport settings.
// It is the benchmark's measure of what Go's reverse proxy costs by itself,
// so that the figures separate the limiter's cost from the proxy's.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18085", "address")
	up := flag.String("upstream", "http://127.0.0.1:18081", "upstream URL")
	flag.Parse()
	target, err := url.Parse(*up)
	if err != nil {
		log.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 1024
	tr.IdleConnTimeout = 90 * time.Second
	tr.DisableCompression = true
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport:  tr,
		BufferPool: pool{},
	}
	srv := &http.Server{Addr: *addr, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

type pool struct{}

var buffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (pool) Get() []byte  { return buffers.Get().(*[32 << 10]byte)[:] }
func (pool) Put(b []byte) { buffers.Put((*[32 << 10]byte)(b[:32<<10])) }
