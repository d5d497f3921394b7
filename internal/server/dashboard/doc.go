// Package dashboard serves the admin listener's page in the browser, at
// /ui/, and the JSON it reads: GET /v1/status and GET /v1/top.
//
// The page is three embedded files (HTML, JS, CSS) with no build step and
// no fetch outside its own listener. Every 2 seconds it reads /v1/status
// and /v1/top by relative URLs. It computes per-second rates itself from
// two successive cumulative counters and their Status.Time. It writes
// every value with textContent, never as HTML: rule names and keys come
// from configuration and clients.
//
// # Authentication
//
// The page's assets are public: they hold no data. The two JSON endpoints
// are behind the admin token when reads are protected (WithAuthorize).
// A browser sends no Authorization header when it navigates, so the page
// asks for the token itself. When a read answers 401 the page shows a
// token field. The token typed there is kept in the tab's sessionStorage,
// so it is gone when the tab closes. It is sent as "Authorization: Bearer
// <token>" on the page's reads. It never appears in a URL, a cookie or
// localStorage. "Forget token" removes it.
//
// The assets are served with a Content-Security-Policy that allows only
// the listener's own scripts, styles and connections.
package dashboard
