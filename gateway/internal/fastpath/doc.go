// Package fastpath is the gateway's HTTP/1.1 fast path: a server that
// reads client connections itself. It relays their plain requests over the
// direct upstream transport, decided by the httplimit middleware
// (Middleware.Admit). It hands every other connection, unread, to net/http.
package fastpath
