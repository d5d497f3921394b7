// Package upstream is the gateway's HTTP/1.1 client to a plain-HTTP
// upstream: a keep-alive pool whose requests go out on the calling
// goroutine, each pooled connection peeked before it is reused.
package upstream
