package h1

import (
	"net/http"
	"strconv"
)

// AppendStatus appends the status line of an HTTP/1.1 response with code,
// with net/http's status text, as net/http's server writes it.
func AppendStatus(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		return append(append(b, text...), "\r\n"...)
	}
	b = append(b, "status code "...)
	b = strconv.AppendInt(b, int64(code), 10)
	return append(b, "\r\n"...)
}

// AppendHeaderMap appends the header lines of h, each with CRLF, in the
// map's order.
func AppendHeaderMap(b []byte, h http.Header) []byte {
	for k, vs := range h {
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}
