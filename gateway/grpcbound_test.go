package gateway

import (
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// The bounds on a gRPC call's body. A request labelled application/grpc is
// read like any other body unless the upstream speaks gRPC (upstream_protocol:
// h2); then it streams, but a message begun, or the first one awaited,
// must come within body_timeout. A stalled call holds no upstream request
// beyond that bound, gives its concurrency slot back and stays counted.

// heldUpstream serves h1 or h2c and counts the requests it holds: those
// whose body it is still reading.
type heldUpstream struct {
	URL        string
	seen, held atomic.Int64
}

// newHeldUpstream starts an upstream that reads each body whole, then
// answers "ok" (with grpc-status 0, for gRPC clients); h2 serves h2c by
// prior knowledge only.
func newHeldUpstream(t testing.TB, h2 bool) *heldUpstream {
	t.Helper()
	u := &heldUpstream{}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.seen.Add(1)
		u.held.Add(1)
		defer u.held.Add(-1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "Grpc-Status")
		io.WriteString(w, "ok")
		w.Header().Set("Grpc-Status", "0")
	}))
	if h2 {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		s.Config.Protocols = &p
	}
	s.Start()
	t.Cleanup(s.Close)
	u.URL = s.URL
	return u
}

// freed waits, polling up to a deadline, until u holds no request.
func (u *heldUpstream) freed(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for u.held.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the upstream still holds %d requests 5s after the bound", u.held.Load())
		}
		time.Sleep(10 * time.Millisecond) // the polling interval
	}
}

// grpcPrefix is the 5-byte prefix of an uncompressed gRPC message of n
// bytes.
func grpcPrefix(n int) []byte {
	b := make([]byte, 5)
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	return b
}

// stall opens n streams on c labelled contentType, each sending data and
// then nothing (no END_STREAM), and returns their ids.
func stall(c *h2conn, scheme, path, contentType string, data []byte, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = c.open(false, ":method", "POST", ":scheme", scheme, ":authority", "gw.test", ":path", path, "content-type", contentType, "te", "trailers")
		c.write(c.fr.WriteData(ids[i], false, data))
	}
	return ids
}

// TestGRPCLabelStallToHTTP1Upstream: streams labelled gRPC that stall
// after 5 bytes of a message are cut by body_timeout, as a JSON body is,
// when the upstream speaks HTTP/1.1: 408, and the upstream never holds
// them. They used to stream to it unbounded, a held upstream connection
// each.
func TestGRPCLabelStallToHTTP1Upstream(t *testing.T) {
	const streams = 50
	for _, edge := range h2Edges {
		for _, tr := range []via{{"fast", "direct"}, {"standard", "standard"}} {
			for _, ct := range []string{"application/json", "application/grpc", "application/grpc+proto"} {
				t.Run(edge+"/"+tr.String()+"/"+ct, func(t *testing.T) {
					up := newHeldUpstream(t, false)
					g := startH2(t, tr, edge, up.URL, defaultRules+"client: {body_timeout: 300ms}\n")
					c := g.dial(t)
					ids := stall(c, g.scheme(), "/s", ct, grpcPrefix(10), streams)
					for id, a := range c.wait(ids...) {
						if a.status != http.StatusRequestTimeout {
							t.Fatalf("stream %d: %s, want 408", id, a)
						}
					}
					up.freed(t)
					if n := up.seen.Load(); n != 0 {
						t.Errorf("the upstream saw %d requests whose body never came", n)
					}
				})
			}
		}
	}
}
