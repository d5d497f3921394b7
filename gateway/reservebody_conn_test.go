package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// reserveRules reserve each request's max_tokens (500 without it) out of
// 1000 tokens a day per Authorization; the remaining a request is
// answered with tells the reserve it was decided with.
const reserveRules = `rules:
  - name: tpd
    key: [header:Authorization]
    cost: {response_json: usage.total_tokens, max: 1000, default: 50, reserve: {request_json: max_tokens, default: 500}}
    limit: {algorithm: token_bucket, rate: 1000, period: 24h}
`

// usageReply answers with a usage of 0 tokens: a settled request costs
// nothing, so each key's remaining at admission is 1000 less its reserve.
func usageReply(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"usage":{"total_tokens":0}}`)
}

// chunked frames body in chunks of n bytes.
func chunked(body string, n int) string {
	var b strings.Builder
	for rest := body; len(rest) > 0; {
		k := min(n, len(rest))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", k, rest[:k])
		rest = rest[k:]
	}
	return b.String() + "0\r\n\r\n"
}

// reserveConnCase is a request whose body the reserve reads, written on
// the wire. After it come the requests of next, pipelined in the same
// write when the body is longer than its framing says.
type reserveConnCase struct {
	name    string
	framing string // the header lines that frame the body
	wire    string // the body as sent
	body    string // what the upstream must read
	remain  int    // 1000 less the reserve
	inner   string // a request the extra bytes of wire carry, if any
}

// reserveConnCases are the bodies that must leave the connection as
// they found it: the next request on it read from its first byte.
func reserveConnCases() []reserveConnCase {
	const js = `{"max_tokens":7}`
	big := string(chatBody("7", 1<<20))
	inner := "GET /inner HTTP/1.1\r\nHost: gw.test\r\nAuthorization: inner\r\n\r\n"
	return []reserveConnCase{
		{name: "content-length", framing: "Content-Length: 16\r\n", wire: js, body: js, remain: 993},
		{name: "chunked", framing: "Transfer-Encoding: chunked\r\n", wire: chunked(js, 5), body: js, remain: 993},
		{name: "chunked, a byte a chunk", framing: "Transfer-Encoding: chunked\r\n", wire: chunked(js, 1), body: js, remain: 993},
		{name: "over 1 MiB, content-length", framing: "Content-Length: " + strconv.Itoa(len(big)) + "\r\n", wire: big, body: big, remain: 500},
		{name: "over 1 MiB, chunked", framing: "Transfer-Encoding: chunked\r\n", wire: chunked(big, 100000), body: big, remain: 500},
		{name: "a request inside the body", framing: "Content-Length: " + strconv.Itoa(len(js)+4+len(inner)) + "\r\n",
			wire: js + "\r\n\r\n" + inner, body: js + "\r\n\r\n" + inner, remain: 500},
		{name: "longer than its content-length", framing: "Content-Length: 16\r\n", wire: js + inner, body: js, remain: 993, inner: "/inner"},
		{name: "longer than its chunks", framing: "Transfer-Encoding: chunked\r\n", wire: chunked(js, 7) + inner, body: js, remain: 993, inner: "/inner"},
	}
}

// TestReserveBodyNextRequestOnConnection: after a request whose reserve
// was read from its body, the next request on the keep-alive connection
// is read from its own first byte and decided on its own body, on every
// transport; and the upstream reads every body byte for byte.
func TestReserveBodyNextRequestOnConnection(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, usageReply)
			addr := startVia(t, tr, up.URL, reserveRules)
			for i, c := range reserveConnCases() {
				reserveConnExchange(t, addr, up, fmt.Sprintf("/r/%d", i), c)
			}
		})
	}
}

// reserveConnExchange sends c, then a request of its own on the same
// connection, and holds both answers and what the upstream read.
func reserveConnExchange(t *testing.T, addr string, up *recUpstream, path string, c reserveConnCase) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second)) // against a hang, not a wait
	br := bufio.NewReader(nc)
	go io.WriteString(nc, "POST "+path+" HTTP/1.1\r\nHost: gw.test\r\nAuthorization: "+path+"\r\nContent-Type: application/json\r\n"+c.framing+"\r\n"+c.wire)
	answer := func(what, wantRemain string) bool {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %s: %v", c.name, what, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != wantRemain {
			t.Errorf("%s: %s: %d, remaining %q, want 200 and %s", c.name, what, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), wantRemain)
		}
		return resp.Close
	}
	inner := c.inner
	if answer("the request", strconv.Itoa(c.remain)) {
		// A chunked request closes the connection (view.go): the bytes
		// after its body are never read as a request.
		if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("%s: the gateway said close, then sent more", c.name)
		}
		inner = ""
		nc.Close()
		if nc, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		br = bufio.NewReader(nc)
	} else if inner != "" {
		answer("the request after its body", "500")
	}
	const next = `{"max_tokens":3}`
	io.WriteString(nc, "POST "+path+"/next HTTP/1.1\r\nHost: gw.test\r\nAuthorization: "+path+"/next\r\nContent-Length: 16\r\n\r\n"+next)
	answer("the next request", "997")
	got := map[string]string{}
	for _, r := range up.take() {
		got[r.URI] = r.Body
	}
	want := map[string]string{path: c.body, path + "/next": next}
	if inner != "" {
		want[inner] = ""
	}
	if len(got) != len(want) {
		t.Errorf("%s: the upstream got %d requests, want %d", c.name, len(got), len(want))
	}
	for uri, body := range want {
		if b, ok := got[uri]; !ok || b != body {
			t.Errorf("%s: the upstream read %d bytes of %s (%v), want %d", c.name, len(b), uri, ok, len(body))
		}
	}
}

// TestReserveBodyShorterThanDeclared: a body that ends before its
// Content-Length or its last chunk, from a client that stopped sending
// but still reads, is answered with an error, never an empty 200; and
// the upstream never reads it as a whole body.
func TestReserveBodyShorterThanDeclared(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			up := newRecUpstream(t, usageReply)
			for j, rules := range []string{reserveRules, "rules: []\n"} {
				addr := startVia(t, tr, up.URL, rules)
				for i, raw := range []string{
					"Content-Length: 100\r\n\r\n{\"max_tokens\":7}",
					"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"max_tokens\":7}\r\n",
					"Transfer-Encoding: chunked\r\n\r\n20\r\n{\"max_tokens\":7}",
				} {
					path := fmt.Sprintf("/short/%d/%d", j, i)
					nc, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					nc.SetDeadline(time.Now().Add(20 * time.Second)) // against a hang, not a wait
					io.WriteString(nc, "POST "+path+" HTTP/1.1\r\nHost: gw.test\r\nAuthorization: "+path+"\r\n"+raw)
					nc.(*net.TCPConn).CloseWrite()
					resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
					switch {
					case err != nil && tr.client == "fast":
						// The fast path closes a connection whose body
						// it could not hand over whole.
					case err != nil:
						t.Errorf("%q: no answer: %v", raw, err)
					case resp.StatusCode != http.StatusBadRequest:
						b, _ := io.ReadAll(resp.Body)
						t.Errorf("%q: answered %d %q, want 400", raw, resp.StatusCode, b)
					}
					nc.Close()
					for _, r := range up.take() {
						if r.URI == path && !strings.HasSuffix(r.Body, "[body error]") {
							t.Errorf("%q: the upstream read %q as a whole body", raw, r.Body)
						}
					}
				}
			}
		})
	}
}
