// Package h1 is the HTTP/1.1 wire format of the gateway's fast path:
// request and response heads, chunked framing, status and header lines,
// in the forms net/http reads and writes them. Pure functions over bytes:
// the connections are the fast path's.
package h1
