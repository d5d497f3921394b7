package h1test

import "strings"

// OKResponse is a plain 200 with a body of two bytes.
const OKResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// Responses are raw upstream responses, good and broken, for tests that
// hold a response reader to net/http's.
var Responses = []string{
	OKResponse,
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\nuntil the end",
	"HTTP/1.0 200 OK\r\n\r\nuntil the end",
	"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 304 Not Modified\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
	"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 20 Short\r\n\r\n",
	"HTTP/2.0 200 OK\r\n\r\n",
	"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("x", 5<<10) + "\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
	"garbage\r\n\r\n",
	"",
}
