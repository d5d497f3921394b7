// Package h2 is the gateway's HTTP/2 server for client connections
// (client_h2: frames), built on x/net/http2's Framer and HPACK. It relays
// plain requests over the direct upstream transport, as the HTTP/1.1 fast
// path does, and hands every other stream to the gateway's http.Handler.
package h2
