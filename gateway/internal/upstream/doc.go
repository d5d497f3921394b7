// Package upstream is the gateway's HTTP/1.1 client to its upstream, in
// clear text or over TLS. It is a keep-alive pool whose requests go out on
// the calling goroutine. Each pooled connection is checked before it is
// reused: the socket is peeked, and over TLS what crypto/tls holds is read.
package upstream
