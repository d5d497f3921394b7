package gateway

import (
	"net/http/httputil"
	"sync"
	"sync/atomic"
)

// reroutes are the proxies to the upstreams that rules' over_limit
// reroute to, one per distinct URL. They are built when a rules set is
// loaded, so a changed URL applies from the next request. Each has the
// main upstream's timeouts, upstream_tls and upstream_protocol, and
// http.Transport: the fast path never serves a request that may reroute.
type reroutes struct {
	mu      sync.Mutex // serializes builds
	proxies atomic.Pointer[map[string]*httputil.ReverseProxy]
}

// loadReroutes makes urls the upstreams served, keeping the proxies of those
// already built and closing the idle connections of those dropped. On an
// error nothing changes.
func (g *Gateway) loadReroutes(urls []string) error {
	rr := &g.reroutes
	rr.mu.Lock()
	defer rr.mu.Unlock()
	old := rr.current()
	next := make(map[string]*httputil.ReverseProxy, len(urls))
	for _, u := range urls {
		if p, ok := old[u]; ok {
			next[u] = p
			continue
		}
		p, err := g.proxyTo(u, false)
		if err != nil {
			return err
		}
		next[u] = p
	}
	rr.proxies.Store(&next)
	for u, p := range old {
		if _, kept := next[u]; !kept {
			closeIdle(p)
		}
	}
	return nil
}

// current is the map of proxies in use; nil before the first load.
func (rr *reroutes) current() map[string]*httputil.ReverseProxy {
	if m := rr.proxies.Load(); m != nil {
		return *m
	}
	return nil
}

// rerouteProxy is the proxy to u. A request decided under a set that a reload
// has since replaced may name a URL no longer loaded: it is built then,
// and kept until the next reload drops it.
func (g *Gateway) rerouteProxy(u string) (*httputil.ReverseProxy, error) {
	if p, ok := g.reroutes.current()[u]; ok {
		return p, nil
	}
	rr := &g.reroutes
	rr.mu.Lock()
	defer rr.mu.Unlock()
	old := rr.current()
	if p, ok := old[u]; ok {
		return p, nil
	}
	p, err := g.proxyTo(u, false)
	if err != nil {
		return nil, err
	}
	next := make(map[string]*httputil.ReverseProxy, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[u] = p
	rr.proxies.Store(&next)
	return p, nil
}

// closeReroutes closes the idle connections of every reroute proxy.
func (g *Gateway) closeReroutes() {
	for _, p := range g.reroutes.current() {
		closeIdle(p)
	}
}

// closeIdle closes the idle connections of p's transport.
func closeIdle(p *httputil.ReverseProxy) {
	if ci, ok := p.Transport.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
