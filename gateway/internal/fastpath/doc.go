// Package fastpath is the gateway's HTTP/1.1 fast path: a server that
// reads client connections itself and relays their plain requests,
// decided by the httplimit middleware (Middleware.Admit), over the direct
// upstream transport, handing every other connection, unread, to net/http.
package fastpath
