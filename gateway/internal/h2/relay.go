package h2

import (
	"bufio"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/ratekeeper/ratekeeper/gateway/internal/fastpath"
	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
	"github.com/ratekeeper/ratekeeper/gateway/internal/problem"
	"github.com/ratekeeper/ratekeeper/gateway/internal/upstream"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/rules"
)

// relayed is what relaying one stream needs, kept in a pool.
type relayed struct {
	set    *rules.Set
	want   []string
	wantV  [][]string
	req    http.Request
	url    url.URL
	hdr    http.Header
	w      answer
	norm   string // the path the upstream is sent, escaped
	query  string // with its '?', or ""
	resp   h1.RespHead
	respN  int
	out    []hpack.HeaderField
	names  map[string]string // header names as the upstream wrote them, in lower case
	values map[string]string // header values by the upstream's line
}

var relayPool = sync.Pool{New: func() any {
	return &relayed{hdr: http.Header{}, w: answer{h: http.Header{}}, names: map[string]string{}, values: map[string]string{}}
}}

// answer collects the middleware's headers, and its answer when it
// answers itself.
type answer struct {
	h      http.Header
	status int
	body   []byte
}

func (w *answer) Header() http.Header { return w.h }

func (w *answer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *answer) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, p...)
	return len(p), nil
}

// headersRead are the headers a rules set reads, cached per set.
type headersRead struct {
	set  *rules.Set
	want []string
	all  bool
}

// relay serves st if it is plain: no body, a request view built as the
// gateway's view.go builds it, and a decision Admit makes without the
// Handler. It reports whether it served st.
func (c *conn) relay(st *stream) bool {
	s := c.s
	if !st.bodyless || st.truncated || st.protocol != "" || st.method == http.MethodConnect {
		return false
	}
	if s.HandOffAll != nil && s.HandOffAll() {
		return false
	}
	rs := relayPool.Get().(*relayed)
	defer relayPool.Put(rs)
	if !c.view(st, rs) {
		return false
	}
	clear(rs.w.h)
	rs.w.status, rs.w.body = 0, rs.w.body[:0]
	switch s.mw.Admit(&rs.w, &rs.req, rs.set) {
	case httplimit.Deferred:
		return false
	case httplimit.Answered:
		c.answer(st, rs)
		return true
	}
	c.forward(st, rs)
	return true
}

// view builds st's request view into rs, and reports whether the relay
// may serve it: anything the view would refuse or change goes to the
// Handler, whose view answers it.
func (c *conn) view(st *stream, rs *relayed) bool {
	s := c.s
	hr := s.read.Load()
	if set := s.mw.Rules(); hr == nil || hr.set != set {
		hr = &headersRead{set: set}
		hr.want, hr.all = set.HeadersRead()
		s.read.Store(hr)
	}
	if hr.all || !h1.IsToken(st.method) || !h1.ValidHost(st.authority) {
		return false
	}
	rs.set, rs.want = hr.set, hr.want
	path, query, ok := splitTarget(st.path)
	if !ok {
		return false
	}
	decoded, norm, err := fastpath.NormalizeTarget(path, s.settings.AllowEncodedSlash)
	if err != nil {
		return false
	}
	rs.norm, rs.query = norm, query
	if cap(rs.wantV) < len(rs.want) {
		rs.wantV = make([][]string, len(rs.want))
	}
	rs.wantV = rs.wantV[:len(rs.want)]
	for k := range rs.wantV {
		rs.wantV[k] = rs.wantV[k][:0]
	}
	if !c.readFields(st, rs) {
		return false
	}
	clear(rs.hdr)
	for k, name := range rs.want {
		vs := rs.wantV[k]
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 && name != "X-Forwarded-For" && name != "Forwarded" {
			return false // read twice: the view answers 400
		}
		if name != "X-Forwarded-For" && name != "Forwarded" && strings.Trim(vs[0], " \t") != vs[0] {
			return false // white space around it: the view answers 400
		}
		rs.hdr[name] = vs[:len(vs):len(vs)]
	}
	rs.url = url.URL{Path: decoded}
	if strings.Contains(query, "_method=") {
		rs.url.RawQuery = query[1:] // a POST's method override, which rules read
	}
	rs.req = http.Request{
		Method: st.method, URL: &rs.url, Host: st.authority, Header: rs.hdr, RemoteAddr: c.remote,
		Proto: "HTTP/2.0", ProtoMajor: 2, RequestURI: st.path, Body: http.NoBody,
	}
	if st.scheme == "https" {
		rs.req.TLS = c.tls
	}
	return true
}

// readFields checks st's fields for what the relay does not forward as
// they are, and collects the values of those the rules read.
func (c *conn) readFields(st *stream, rs *relayed) bool {
	for _, f := range st.fields {
		name := f.Name
		if strings.IndexByte(name, '_') >= 0 {
			return false // the view drops it
		}
		switch name {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade", "te",
			"trailer", "expect", "http2-settings", "proxy-authorization", "proxy-authenticate":
			return false
		case "content-length":
			if f.Value != "0" {
				return false
			}
		case "host":
			if !strings.EqualFold(f.Value, st.authority) {
				return false // the view answers 400
			}
		}
		for k, w := range rs.want {
			if len(w) == len(name) && strings.EqualFold(w, name) {
				rs.wantV[k] = append(rs.wantV[k], f.Value)
			}
		}
	}
	return true
}

// splitTarget splits an origin-form :path into its path and its query
// (with the '?'). It refuses a target whose bytes ReverseProxy would not
// pass on as they are.
func splitTarget(t string) (path, query string, ok bool) {
	if len(t) == 0 || t[0] != '/' {
		return "", "", false
	}
	q := len(t)
	for i := 0; i < len(t); i++ {
		switch b := t[i]; {
		case b <= ' ' || b >= 0x7f || b == '#':
			return "", "", false
		case b == '?' && q == len(t):
			q = i
		case b == ';' && q < len(t):
			return "", "", false // ReverseProxy rewrites such a query
		case b == '%' && q < len(t):
			if i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2]) {
				return "", "", false
			}
		}
	}
	return t[:q], t[q:], true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// answer writes the middleware's own answer (429, 403), or a 502.
func (c *conn) answer(st *stream, rs *relayed) {
	w := &rs.w
	if w.status == 0 {
		w.status = http.StatusOK
	}
	body := w.body
	if st.method == http.MethodHead {
		body = nil
	}
	clen := ""
	if _, ok := w.h["Content-Length"]; !ok {
		clen = strconv.Itoa(len(w.body))
	}
	fields := appendHeaderMap(rs.out[:0], w.status, w.h, "", clen, c.s.dateIfNone(w.h))
	rs.out = fields
	if err := st.writeHeaders(fields, len(body) == 0); err == nil && len(body) > 0 {
		st.writeData(body, true)
	}
	c.flush()
	st.finish()
}

var errClientGone = errors.New("the client reset the stream")

// forward sends the request to the upstream and its response to the
// client.
func (c *conn) forward(st *stream, rs *relayed) {
	s := c.s
	retry := st.method == http.MethodGet || st.method == http.MethodHead || st.method == http.MethodOptions
	var (
		u   *upstream.Conn
		err error
	)
	for attempt := 0; ; attempt++ {
		u, err = s.up.Get(contextBackground, attempt == 0)
		if err != nil {
			break
		}
		st.up.Store(u)
		if st.gone.Load() {
			err = errClientGone
			break
		}
		u.BoundHead()
		if d := s.settings.ResponseHeaderTimeout; d > 0 {
			u.SetReadDeadline(time.Now().Add(d))
		}
		err = c.writeUpstream(u.W, st, rs)
		if err == nil {
			err = u.W.Flush()
		}
		if err == nil {
			err = c.readHead(u, st, rs)
		}
		u.Unbound()
		if err == nil {
			break
		}
		if st.up.CompareAndSwap(u, nil) {
			u.Close()
		}
		if !(attempt == 0 && retry && u.Stale()) || st.gone.Load() {
			break
		}
	}
	if st.gone.Load() {
		if u != nil && st.up.CompareAndSwap(u, nil) {
			u.Close()
		}
		return // the client reset the stream: no one to answer
	}
	if err != nil {
		s.logger.Warn("upstream unreachable", "upstream", s.upstream, "method", st.method, "path", rs.url.Path, "err", err)
		rs.w.status, rs.w.body = 0, rs.w.body[:0]
		problem.BadGateway(&rs.w, s.upstream, err)
		c.answer(st, rs)
		return
	}
	if s.settings.ResponseHeaderTimeout > 0 {
		u.SetReadDeadline(time.Time{})
	}
	c.relayResponse(st, rs, u)
}

// writeUpstream writes the request as httputil.ReverseProxy would send it
// over the direct transport, as the fast path writes it (fastpath's
// writeUpstream): the client's end-to-end fields, then the forwarding
// headers.
func (c *conn) writeUpstream(w *bufio.Writer, st *stream, rs *relayed) error {
	s := c.s
	w.WriteString(st.method)
	w.WriteByte(' ')
	w.WriteString(s.prefix)
	w.WriteString(rs.norm)
	w.WriteString(rs.query)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(s.host)
	w.WriteString("\r\n")
	if st.method == http.MethodHead {
		w.WriteString("Connection: close\r\n")
	}
	set := rs.set
	trusted := set.ClientIP().Trusts(&rs.req)
	drop := set.DropNames(len(set.ProxyHeaders()) == 0 || trusted)
	agent, cookies := false, 0
	for _, f := range st.fields {
		switch f.Name {
		case "host", "content-length", "forwarded", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-for":
			continue
		case "user-agent":
			first := !agent
			agent = true
			if !first || strings.TrimSpace(f.Value) == "" {
				continue
			}
		case "cookie":
			cookies++
			if cookies > 1 {
				continue
			}
			writeCookies(w, st.fields)
			continue
		}
		if isClientIPHeader(f.Name) && !trusted || hasName(drop, f.Name) {
			continue
		}
		writeCanonical(w, f.Name)
		w.WriteString(": ")
		w.WriteString(f.Value)
		w.WriteString("\r\n")
	}
	for _, h := range set.OverLimitHeaders() {
		if vs := rs.hdr[h]; len(vs) > 0 { // set by the middleware on the request: rule names
			w.WriteString(h)
			w.WriteString(": ")
			w.WriteString(vs[0])
			w.WriteString("\r\n")
		}
	}
	c.writeForwarded(w, st, trusted)
	if st.method == http.MethodPost || st.method == http.MethodPut || st.method == http.MethodPatch {
		w.WriteString("Content-Length: 0\r\n")
	}
	_, err := w.WriteString("\r\n")
	return err
}

// writeForwarded writes X-Forwarded-For (a trusted proxy's, then the
// peer), X-Forwarded-Host and X-Forwarded-Proto, as ReverseProxy's
// SetXForwarded does.
func (c *conn) writeForwarded(w *bufio.Writer, st *stream, trusted bool) {
	w.WriteString("X-Forwarded-For: ")
	if trusted {
		for _, f := range st.fields {
			if f.Name == "x-forwarded-for" {
				w.WriteString(f.Value)
				w.WriteString(", ")
			}
		}
	}
	w.WriteString(c.peer)
	w.WriteString("\r\nX-Forwarded-Host: ")
	w.WriteString(st.authority)
	if st.scheme == "https" && c.tls != nil {
		w.WriteString("\r\nX-Forwarded-Proto: https\r\n")
	} else {
		w.WriteString("\r\nX-Forwarded-Proto: http\r\n")
	}
}

// writeCookies writes the cookie fields as one header, joined as net/http's
// HTTP/2 server joins them (RFC 9113, 8.2.3).
func writeCookies(w *bufio.Writer, fields []hpack.HeaderField) {
	w.WriteString("Cookie: ")
	n := 0
	for _, f := range fields {
		if f.Name == "cookie" {
			if n > 0 {
				w.WriteString("; ")
			}
			w.WriteString(f.Value)
			n++
		}
	}
	w.WriteString("\r\n")
}

// writeCanonical writes a lower-case field name as net/http canonicalizes
// it: upper case first and after each hyphen.
func writeCanonical(w *bufio.Writer, name string) {
	up := true
	for i := 0; i < len(name); i++ {
		b := name[i]
		if up && 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		w.WriteByte(b)
		up = b == '-'
	}
}

func hasName(lower []string, name string) bool {
	for _, n := range lower {
		if n == name {
			return true
		}
	}
	return false
}

// isClientIPHeader reports whether the lower-case name is one of the
// headers that name the client's address (rules.ClientAddressHeaders).
func isClientIPHeader(lower string) bool {
	switch lower {
	case "x-real-ip", "true-client-ip", "x-client-ip", "client-ip", "x-cluster-client-ip", "cf-connecting-ip", "fastly-client-ip":
		return true
	}
	return false
}
