package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1/h1test"
)

// An upstream that writes more than the response asked for (a
// late body after HEAD, a second response, a 408 on an idle connection)
// must never have those bytes read as the next client's answer.
func TestUnsolicitedResponseNeverReachesAnotherClient(t *testing.T) {
	for _, extra := range []struct{ name, after string }{
		{"second response", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nPOISONED\n"},
		{"408 on idle", "HTTP/1.1 408 Request Timeout\r\nContent-Length: 9\r\n\r\nPOISONED\n"},
		{"stray bytes", "POISONED\n"},
	} {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			for _, tr := range transports {
				t.Run(extra.name+"/"+method+"/"+tr.String(), func(t *testing.T) {
					wrote, closed := make(chan struct{}, 4), make(chan struct{}, 4)
					up := h1test.RawServer(t, func(c net.Conn, br *bufio.Reader) {
						poisoned := false
						for {
							req, err := http.ReadRequest(br)
							if err != nil {
								if poisoned {
									closed <- struct{}{}
								}
								return
							}
							io.Copy(io.Discard, req.Body)
							body := "answer to " + req.URL.Path + "\n"
							io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n")
							if req.Method != "HEAD" {
								io.WriteString(c, body)
							}
							if req.URL.Path == "/a" {
								io.WriteString(c, extra.after) // unasked, after a whole response
								poisoned = true
								wrote <- struct{}{}
							}
						}
					})
					addr := startVia(t, tr, up, defaultRules)
					body := ""
					if method == "POST" {
						body = "Content-Length: 0\r\n"
					}
					resp, got := rawExchange(t, addr, method+" /a HTTP/1.1\r\nHost: gw.test\r\n"+body+"\r\n")
					if resp.StatusCode != 200 || method != "HEAD" && got != "answer to /a\n" {
						t.Fatalf("A: %d %q", resp.StatusCode, got)
					}
					<-wrote // the stray bytes are on the pooled connection now
					if tr.upstream == "standard" {
						// http.Transport's reader goroutine finds them and
						// closes the connection: wait for that, as it races
						// a request that takes the connection meanwhile (a
						// window of Go's that docs/security.md states). The
						// direct transport checks at reuse: no wait.
						<-closed
					}
					for _, p := range []string{"/b", "/c"} {
						resp, got = rawExchange(t, addr, method+" "+p+" HTTP/1.1\r\nHost: gw.test\r\n"+body+"\r\n")
						if resp.StatusCode != 200 || method != "HEAD" && got != "answer to "+p+"\n" {
							t.Errorf("%s got %d %q: another client's bytes", p, resp.StatusCode, got)
						}
					}
				})
			}
		}
	}
}

// An upstream head with bare-LF lines reaches the client with
// CRLF lines.
func TestBareLFResponseHead(t *testing.T) {
	up := newRawUpstream(t)
	up.raw = []byte("HTTP/1.1 200 OK\nX-A: 1\nContent-Type: text/plain\nContent-Length: 2\n\nok")
	for _, client := range []string{"fast", "standard"} {
		addr := startGateway(t, client, up.url, defaultRules)
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(nc, "GET / HTTP/1.1\r\nHost: gw.test\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(nc)
		nc.Close()
		head, _, ok := strings.Cut(string(b), "\r\n\r\n")
		if !ok {
			t.Fatalf("%s: no CRLF CRLF in %q", client, b)
		}
		if strings.Contains(strings.ReplaceAll(head, "\r\n", ""), "\n") {
			t.Errorf("%s: a bare LF in the head the client got: %q", client, head)
		}
	}
}

// An upstream status outside 100-999 is a 502 on every path; it made
// ReverseProxy's WriteHeader panic, and net/http dropped the connection.
func TestUpstreamStatusZero(t *testing.T) {
	up := newRecUpstream(t, rawReply("HTTP/1.1 000 OK\r\nContent-Length: 0\r\n\r\n"))
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			addr := startVia(t, tr, up.URL, "rules: []\n")
			resp, _ := rawExchange(t, addr, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("%d, want 502", resp.StatusCode)
			}
		})
	}
}
