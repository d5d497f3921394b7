// Package upstream is the gateway's HTTP/1.1 client to its upstream, in
// clear text or over TLS: a keep-alive pool whose requests go out on the
// calling goroutine, each pooled connection checked before it is reused
// (the socket peeked, and over TLS what crypto/tls holds read).
package upstream
