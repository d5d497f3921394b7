package gateway

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
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
// answers "ok" (with grpc-status 0, for gRPC clients); on a path ending
// in /early it sends its head first, on one ending in /quick it answers at
// once without reading the body, on /push as push does. h2 serves h2c by prior knowledge only.
func newHeldUpstream(t testing.TB, h2 bool) *heldUpstream {
	t.Helper()
	u := &heldUpstream{}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.seen.Add(1)
		u.held.Add(1)
		defer u.held.Add(-1)
		if strings.HasSuffix(r.URL.Path, "/quick") {
			w.Header().Set("Grpc-Status", "0") // trailers-only, the body unread
			return
		}
		if strings.HasSuffix(r.URL.Path, "/push") {
			push(w, r)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/early") {
			w.WriteHeader(http.StatusOK) // the head before the body
			w.(http.Flusher).Flush()
		}
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

// TestGRPCStallToH2Upstream: towards an upstream that speaks gRPC a call
// streams, and a client that stalls before its first whole message, or
// inside a later one, is cut after body_timeout: 408 while the upstream
// has not answered, a reset stream once it has. The upstream's streams end
// with it.
func TestGRPCStallToH2Upstream(t *testing.T) {
	const streams = 50
	whole := append(grpcPrefix(3), "abc"...)
	for _, edge := range h2Edges {
		for _, tc := range []struct {
			name, path string
			data       []byte
			reset      bool // the upstream answered before the stall: a reset, not a 408
		}{
			{"no message", "/s", nil, false},
			{"5 bytes of the first", "/s", grpcPrefix(10), false},
			{"half a message after a whole one", "/s", append(whole, grpcPrefix(10)[:3]...), false},
			{"5 bytes, answer begun", "/early", grpcPrefix(10), true},
		} {
			t.Run(edge+"/"+tc.name, func(t *testing.T) {
				up := newHeldUpstream(t, true)
				g := startH2(t, transports[0], edge, up.URL, "upstream_protocol: h2\n"+defaultRules+"client: {body_timeout: 300ms}\n")
				c := g.dial(t)
				ids := stall(c, g.scheme(), tc.path, "application/grpc", tc.data, streams)
				for id, a := range c.wait(ids...) {
					switch {
					case tc.reset && !a.wasRst:
						t.Fatalf("stream %d: %s, want a reset after the upstream's head", id, a)
					case !tc.reset && a.status != http.StatusRequestTimeout:
						t.Fatalf("stream %d: %s %q, want 408", id, a, a.body.String())
					}
				}
				up.freed(t)
			})
		}
	}
}

// TestGRPCStreamsOutliveBodyTimeout: the bound cuts only stalls. Through a
// gateway whose body_timeout is 300ms, a bidirectional stream whose client
// pauses between messages for longer, a server stream that waits on its
// server, and a message of 3 MiB (many reads, flow control between them)
// all go on as they would without the gateway.
func TestGRPCStreamsOutliveBodyTimeout(t *testing.T) {
	// A bound a loaded machine's pause between two reads of the 3 MiB
	// message stays under.
	const bound = time.Second
	upAddr, hs := startGRPCUpstream(t)
	g := runGateway(t, "fast", "http://"+upAddr, "h2c: true\nupstream_protocol: h2\n"+defaultRules+"client: {body_timeout: 1s}\n")
	cc, err := grpc.NewClient("localhost:"+portOf(g.Addr()), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	bidi, err := reflectpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if i > 0 {
			time.Sleep(2 * bound) // the client's pause between messages: the input, not a wait
		}
		if err := bidi.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if r, err := bidi.Recv(); err != nil || r.GetListServicesResponse() == nil {
			t.Fatalf("answer %d: %v %v", i, r, err)
		}
	}
	bidi.CloseSend()
	if _, err := bidi.Recv(); err != io.EOF {
		t.Errorf("the bidirectional stream's end: %v", err)
	}

	health := healthpb.NewHealthClient(cc)
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first message: %v %v", m, err)
	}
	time.Sleep(2 * bound) // the server has nothing to say for a while
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_NOT_SERVING)
	if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("second message: %v %v", m, err)
	}

	_, err = health.Check(ctx, &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 3<<20)})
	if status.Code(err) != codes.NotFound {
		t.Errorf("a 3 MiB message: %v, want the upstream's NotFound", err)
	}
}

// FuzzGRPCFraming: however a client's bytes are split into reads, the
// framing grpcBody follows ends in the state a plain parse of the whole
// gives: whether a message was read whole, and whether one is begun.
func FuzzGRPCFraming(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0}, uint8(1))
	f.Add(append(grpcPrefix(3), "abc"...), uint8(2))
	f.Add(append(append(grpcPrefix(3), "abc"...), 1, 0xff, 0xff), uint8(7))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 1, 2}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		// The plain parse.
		whole, begun := false, false
		for rest := data; len(rest) > 0; {
			if len(rest) < 5 {
				begun = true
				break
			}
			n := uint64(binary.BigEndian.Uint32(rest[1:5]))
			if uint64(len(rest)-5) < n {
				begun = true
				break
			}
			whole, rest = true, rest[5+n:]
		}
		var b grpcBody
		for p := data; len(p) > 0; {
			k := min(len(p), int(step)+1)
			b.frame(p[:k])
			p = p[k:]
		}
		if b.whole != whole || (b.got > 0 || b.left > 0) != begun {
			t.Errorf("split by %d: whole %v, begun %v (got %d, left %d); the plain parse: whole %v, begun %v",
				int(step)+1, b.whole, b.got > 0 || b.left > 0, b.got, b.left, whole, begun)
		}
	})
}

const slotRules = `rules:
  - name: in-flight
    match: {path_prefix: /c}
    concurrency: {max: 1}
  - name: per-hour
    match: {path_prefix: /c}
    limit: {algorithm: token_bucket, rate: 2, period: 1h, burst: 2}
client: {body_timeout: 300ms}
`

// call sends a whole gRPC call of one message on c and waits for the
// answer.
func (c *h2conn) call(scheme, path string) *h2answer {
	id := c.open(false, ":method", "POST", ":scheme", scheme, ":authority", "gw.test", ":path", path, "content-type", "application/grpc", "te", "trailers")
	c.write(c.fr.WriteData(id, true, append(grpcPrefix(3), "abc"...)))
	return c.wait(id)[id]
}

// refusedBy is the rule named by a's refusal, "" if a was not refused.
func refusedBy(a *h2answer) string {
	if a.status != http.StatusOK || a.header.Get("grpc-status") != "8" {
		return ""
	}
	for _, name := range []string{"in-flight", "per-hour"} {
		if strings.Contains(a.header.Get("grpc-message"), name) {
			return name
		}
	}
	return "?"
}

// TestGRPCStallReleasesSlotAndCounts: a stalled gRPC call that the bound
// cuts gives its concurrency slot back (the next call is admitted, polling
// up to a deadline while the gateway ends the cut one) and stays counted
// (with a limit of 2, the call after that is refused by the rate).
func TestGRPCStallReleasesSlotAndCounts(t *testing.T) {
	for _, edge := range h2Edges {
		for _, tc := range []struct {
			name, path string
			h2, reset  bool
		}{
			{"http1 upstream", "/c", false, false},
			{"h2 upstream", "/c", true, false},
			{"h2 upstream, answer begun", "/c/early", true, true},
		} {
			proto := ""
			if tc.h2 {
				proto = "upstream_protocol: h2\n"
			}
			t.Run(edge+"/"+tc.name, func(t *testing.T) {
				up := newHeldUpstream(t, tc.h2)
				g := startH2(t, transports[0], edge, up.URL, proto+slotRules)
				c := g.dial(t)
				id := stall(c, g.scheme(), tc.path, "application/grpc", grpcPrefix(10), 1)[0]
				if a := c.wait(id)[id]; tc.reset && !a.wasRst || !tc.reset && a.status != http.StatusRequestTimeout {
					t.Fatalf("the stalled call: %s, want 408 or, once the upstream answered, a reset", a)
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					a := c.call(g.scheme(), "/c")
					if refusedBy(a) == "" && a.status == http.StatusOK {
						break
					}
					if refusedBy(a) != "in-flight" || time.Now().After(deadline) {
						t.Fatalf("the call after the cut one: %s (refused by %q), want it admitted", a, refusedBy(a))
					}
					time.Sleep(10 * time.Millisecond) // the polling interval
				}
				if a := c.call(g.scheme(), "/c"); refusedBy(a) != "per-hour" {
					t.Errorf("the third call: %s (refused by %q), want refused by per-hour: the cut call counts", a, refusedBy(a))
				}
				up.freed(t)
			})
		}
	}
}

// TestGRPCUpstreamEndsFirst: an upstream that ends a call while its
// client is still sending (before, inside or after a message) ends the
// gateway's handler with a read of the body pending; that read must not
// touch the stream's deadline once the handler has returned (the HTTP/2
// server's ResponseWriter is gone then, and a nil dereference on the
// transport's goroutine killed the process).
func TestGRPCUpstreamEndsFirst(t *testing.T) {
	whole := append(grpcPrefix(3), "abc"...)
	for _, edge := range h2Edges {
		t.Run(edge, func(t *testing.T) {
			up := newHeldUpstream(t, true)
			g := startH2(t, transports[0], edge, up.URL, "upstream_protocol: h2\n"+defaultRules+"client: {body_timeout: 10s}\n")
			for _, data := range [][]byte{nil, grpcPrefix(10), whole} {
				c := g.dial(t)
				ids := stall(c, g.scheme(), "/quick", "application/grpc", data, 20)
				for id, a := range c.wait(ids...) {
					if a.status != http.StatusOK || a.header.Get("grpc-status") != "0" {
						t.Fatalf("after %d bytes, stream %d: %s %v", len(data), id, a, a.header)
					}
				}
				c.nc.Close() // the pending reads end with the connection
			}
			if a := g.dial(t).call(g.scheme(), "/s"); a.status != http.StatusOK {
				t.Fatalf("the gateway after: %s", a)
			}
		})
	}
}

// pushes is how many messages push sends, one every pushEvery.
const (
	pushes    = 20
	pushEvery = 100 * time.Millisecond
)

// push reads one message of 3 bytes, then sends pushes messages, one every
// pushEvery, and ends the call; it reads nothing more of the body.
func push(w http.ResponseWriter, r *http.Request) {
	if _, err := io.ReadFull(r.Body, make([]byte, 8)); err != nil {
		return
	}
	w.Header().Set("Trailer", "Grpc-Status")
	for range pushes {
		w.Write(append(grpcPrefix(3), "evt"...))
		w.(http.Flusher).Flush()
		time.Sleep(pushEvery) // the server's pace: the input, not a wait
	}
	w.Header().Set("Grpc-Status", "0")
}

// TestGRPCIdleBetweenMessages: a call whose client rests between messages
// ends once nothing has flowed either way for grpc_idle_timeout (1.5s
// here, body_timeout 200ms): 408 while the upstream has not answered. A
// call whose client sends a message every 300ms, or whose upstream does
// every 100ms while its client rests, goes on past it. (The margins are a
// loaded machine's pauses.)
func TestGRPCIdleBetweenMessages(t *testing.T) {
	const idle = 1500 * time.Millisecond
	whole := append(grpcPrefix(3), "abc"...)
	for _, edge := range h2Edges {
		t.Run(edge, func(t *testing.T) {
			up := newHeldUpstream(t, true)
			g := startH2(t, transports[0], edge, up.URL, "upstream_protocol: h2\n"+defaultRules+"client: {body_timeout: 200ms, grpc_idle_timeout: 1500ms}\n")
			c := g.dial(t)

			start := time.Now()
			ids := stall(c, g.scheme(), "/s", "application/grpc", whole, 20)
			for id, a := range c.wait(ids...) {
				if a.status != http.StatusRequestTimeout {
					t.Fatalf("a client resting after a message, stream %d: %s, want 408", id, a)
				}
			}
			if d := time.Since(start); d < idle {
				t.Errorf("a resting client was cut after %v, before grpc_idle_timeout", d)
			}
			up.freed(t)

			id := stall(c, g.scheme(), "/s", "application/grpc", whole, 1)[0]
			for range 6 {
				time.Sleep(300 * time.Millisecond) // the client's pace: the input, not a wait
				c.write(c.fr.WriteData(id, false, whole))
			}
			c.write(c.fr.WriteData(id, true, nil))
			if a := c.wait(id)[id]; a.status != http.StatusOK || a.wasRst {
				t.Errorf("a client sending every 300ms for 1.8s: %s", a)
			}

			id = stall(c, g.scheme(), "/push", "application/grpc", whole, 1)[0]
			a := c.wait(id)[id]
			if a.status != http.StatusOK || a.wasRst || a.body.Len() != pushes*8 {
				t.Errorf("a resting client, its upstream pushing every 100ms for 2s: %s, %d bytes of %d", a, a.body.Len(), pushes*8)
			}
		})
	}
}
