package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Tests that run on every client transport (fast, standard) and upstream
// transport (direct, standard) where they apply, over raw sockets.

// transports are the gateway's client and upstream transports, in every
// combination.
var transports = []via{
	{"fast", "direct"}, {"standard", "direct"}, {"fast", "standard"}, {"standard", "standard"},
}

// via is a pair of the gateway's transports.
type via struct{ client, upstream string }

func (tr via) String() string { return tr.client + "/" + tr.upstream }

// startVia starts a gateway in front of upstream on the transports tr.
func startVia(t testing.TB, tr via, upstream, extra string) string {
	t.Helper()
	return startGateway(t, tr.client, upstream, "upstream_transport: "+tr.upstream+"\n"+extra)
}

// rawExchange sends raw on a new connection to addr and reads one response.
func rawExchange(t testing.TB, addr, raw string) (*http.Response, string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return rawExchangeOn(t, nc, raw)
}

// rawExchangeOn is rawExchange on a connection of the caller's (TLS); it
// closes nc.
func rawExchangeOn(t testing.TB, nc net.Conn, raw string) (*http.Response, string) {
	t.Helper()
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second)) // against a hang, not a wait
	if _, err := io.WriteString(nc, raw); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(raw, " ")
	resp, err := http.ReadResponse(bufio.NewReader(nc), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%q: body: %v", raw, err)
	}
	return resp, string(b)
}
