package h1test

import "slices"

// PlainRequests are request heads the fast path must take, each read alike
// by net/http.
var PlainRequests = []string{
	"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET /v1/items/7?x=1&y=%20 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\nX-User-ID: alice\r\n\r\n",
	"POST /v1/posts HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
	"GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\nKeep-Alive: timeout=5\r\n\r\n",
	"GET /%41%2F HTTP/1.1\r\nHost: [::1]:80\r\nX-Forwarded-For: 1.2.3.4\r\nx-forwarded-for: 5.6.7.8, 9.9.9.9\r\nForwarded: for=1.2.3.4\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nX-Obs: caf\xc3\xa9\r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\n",
	"PATCH /a HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: a\r\nProxy-Authorization: Basic eA==\r\nProxy-Authenticate: x\r\nProxy-Connection: keep-alive\r\nHttp2-Settings: AAA\r\nX-User-ID: bob\r\n\r\n",
}

// OtherRequests are request heads the fast path must hand to net/http.
var OtherRequests = []string{
	"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\na",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Secret\r\nX-Secret: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n\r\n",
	"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a|b HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: \rb\r\n\r\n",
}

// Requests are PlainRequests and OtherRequests, in that order: seeds for
// fuzzing a request reader.
func Requests() []string { return slices.Concat(PlainRequests, OtherRequests) }
