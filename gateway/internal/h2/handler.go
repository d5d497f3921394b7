package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The streams the relay does not serve go to the Handler, with an
// *http.Request and a ResponseWriter that writes frames. Both behave as
// x/net/http2's server's do, so that the Handler cannot tell them apart.

// chunkSize is how much of a body the ResponseWriter holds before it
// writes DATA, as x/net's server holds.
const chunkSize = 4 << 10

var errClosedBody = errors.New("http: invalid Read on closed Body")

// serveHandler serves st with the Handler, on the worker's goroutine.
func (c *conn) serveHandler(st *stream) {
	req, h := c.newRequest(st)
	if req == nil {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		c.flush()
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	c.mu.Lock()
	st.cancel = cancel
	if st.gone.Load() {
		cancel()
	}
	c.mu.Unlock()
	req = req.WithContext(ctx)
	w := &responseWriter{st: st, c: c, req: req, h: http.Header{}}
	defer w.stopTimer()
	if !c.runHandler(h, w, req) {
		if c.resetIfOpen(st.id, http2.ErrCodeInternal) {
			c.flush()
		}
		return
	}
	w.handlerDone = true
	err := w.flushChunk()
	if b, ok := req.Body.(*requestBody); ok {
		b.Close()
	}
	c.flush()
	if err == nil {
		st.finish()
		c.flush()
	}
}

// runHandler runs h, and reports whether it returned: a panic resets the
// stream, as net/http's server resets it.
func (c *conn) runHandler(h http.Handler, w *responseWriter, req *http.Request) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				c.s.logger.Error("panic serving an HTTP/2 request", "remote", c.remote, "panic", fmt.Sprint(p))
				if c.s.OnPanic != nil {
					c.s.OnPanic(p)
				}
			}
			ok = false
		}
	}()
	h.ServeHTTP(w, req)
	return true
}

// resetIfOpen resets a stream still open, and reports whether it did.
func (c *conn) resetIfOpen(id uint32, code http2.ErrCode) bool {
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	if st == nil {
		return false
	}
	c.resetStream(id, code)
	return true
}

// newRequest builds st's request as x/net's server builds it, and the
// handler that serves it: the Handler, or an answer x/net's server gives
// itself (431, 400). A nil request is malformed: the stream is reset.
func (c *conn) newRequest(st *stream) (*http.Request, http.Handler) {
	header := make(http.Header, len(st.fields))
	for _, f := range st.fields {
		k := http.CanonicalHeaderKey(f.Name)
		header[k] = append(header[k], f.Value)
	}
	authority := st.authority
	if authority == "" {
		authority = header.Get("Host")
	}
	if st.protocol != "" {
		header.Set(":protocol", st.protocol)
	}
	cont := hasToken(header["Expect"], "100-continue")
	if cont {
		delete(header, "Expect")
	}
	if cookies := header["Cookie"]; len(cookies) > 1 {
		header.Set("Cookie", strings.Join(cookies, "; "))
	}
	var trailer http.Header
	for _, v := range header["Trailer"] {
		for key := range strings.SplitSeq(v, ",") {
			switch key = http.CanonicalHeaderKey(textTrim(key)); key {
			case "Transfer-Encoding", "Trailer", "Content-Length", "":
			default:
				if trailer == nil {
					trailer = http.Header{}
				}
				trailer[key] = nil
			}
		}
	}
	delete(header, "Trailer")
	req := &http.Request{
		Method: st.method, RemoteAddr: c.remote, Header: header, Proto: "HTTP/2.0", ProtoMajor: 2,
		Host: authority, Trailer: trailer, Body: http.NoBody,
	}
	if st.method == http.MethodConnect && st.protocol == "" {
		req.URL, req.RequestURI = &url.URL{Host: authority}, authority
	} else {
		u, err := url.ParseRequestURI(st.path)
		if err != nil {
			return nil, nil
		}
		req.URL, req.RequestURI = u, st.path
	}
	if st.scheme == "https" {
		req.TLS = c.tls
	}
	if !st.bodyless {
		req.ContentLength = st.recvDecl
		req.Body = &requestBody{st: st, needsContinue: cont}
	}
	switch {
	case st.truncated:
		return req, http.HandlerFunc(headerListTooLong)
	case invalidH2Header(header) != nil:
		err := invalidH2Header(header)
		return req, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, err.Error(), http.StatusBadRequest)
		})
	}
	return req, c.s.Handler
}

func textTrim(s string) string { return strings.Trim(s, " \t") }

// hasToken reports whether the comma-separated values hold token, in any
// ASCII case, as httpguts.HeaderValuesContainsToken reads them.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textTrim(t), token) {
				return true
			}
		}
	}
	return false
}

func headerListTooLong(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
	io.WriteString(w, "<h1>HTTP Error 431</h1><p>Request Header Field(s) Too Large</p>")
}

// invalidH2Header refuses the connection-specific fields HTTP/2 forbids
// (RFC 9113, 8.2.2), as x/net's server refuses them.
func invalidH2Header(h http.Header) error {
	for _, k := range [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade"} {
		if _, ok := h[k]; ok {
			return fmt.Errorf("request header %q is not valid in HTTP/2", k)
		}
	}
	if te := h["Te"]; len(te) > 0 && (len(te) > 1 || te[0] != "trailers" && te[0] != "") {
		return errors.New(`request header "TE" may only be "trailers" in HTTP/2`)
	}
	return nil
}

// requestBody is a Handler's request body: its reads give the client its
// window back.
type requestBody struct {
	st            *stream
	needsContinue bool
	mu            sync.Mutex
	closed        bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	closed, cont := b.closed, b.needsContinue
	b.needsContinue = false
	b.mu.Unlock()
	if closed {
		return 0, errClosedBody
	}
	c := b.st.c
	if cont {
		if b.st.writeHeaders([]hpack.HeaderField{{Name: ":status", Value: "100"}}, false) == nil {
			c.flush()
		}
	}
	n, err := b.st.body.read(p)
	if n > 0 {
		c.mu.Lock()
		c.creditLocked(b.st, int64(n))
		c.mu.Unlock()
		c.flush()
	}
	return n, err
}

// Close drops what is left of the body; the client's further DATA is
// taken and dropped.
func (b *requestBody) Close() error {
	b.mu.Lock()
	closed := b.closed
	b.closed = true
	b.mu.Unlock()
	if closed {
		return nil
	}
	if n := b.st.body.breakWithError(errClosedBody); n > 0 {
		c := b.st.c
		c.mu.Lock()
		c.creditLocked(nil, int64(n))
		c.mu.Unlock()
	}
	return nil
}

// responseWriter is a Handler's ResponseWriter: it writes the stream's
// frames as x/net's server writes them.
type responseWriter struct {
	st  *stream
	c   *conn
	req *http.Request
	h   http.Header

	status      int
	wroteHeader bool
	sentHeader  bool
	handlerDone bool
	snap        http.Header // h when the status was written
	buf         []byte
	trailers    []string
	err         error // a write failed: the stream is gone

	tmu   sync.Mutex
	timer *time.Timer // the write deadline
}

func (w *responseWriter) Header() http.Header { return w.h }

func (w *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.wroteHeader {
		return
	}
	if code >= 100 && code <= 199 {
		fields := appendHeaderMap(nil, code, w.h, "", "", "")
		if w.st.writeHeaders(fields, false) == nil {
			w.c.flush()
		}
		return
	}
	w.wroteHeader = true
	w.status = code
	w.snap = w.h.Clone()
	if w.snap == nil {
		w.snap = http.Header{}
	}
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(w.buf) == 0 && len(p) >= chunkSize {
		if err := w.writeChunk(p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= chunkSize {
		err := w.writeChunk(w.buf)
		w.buf = w.buf[:0]
		if err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flushChunk writes what is held, or the head alone.
func (w *responseWriter) flushChunk() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	err := w.writeChunk(w.buf)
	w.buf = w.buf[:0]
	return err
}

func (w *responseWriter) Flush() { w.FlushError() }

// FlushError sends what is written so far.
func (w *responseWriter) FlushError() error {
	if err := w.flushChunk(); err != nil {
		return err
	}
	return w.c.flush()
}

// SetReadDeadline bounds the reads of the request body.
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	if w.st.body != nil {
		w.st.body.setDeadline(t)
	}
	return nil
}

// SetWriteDeadline resets the stream once t passes: a write then fails.
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if t.IsZero() {
		return nil
	}
	id := w.st.id
	expire := func() {
		if w.c.resetIfOpen(id, http2.ErrCodeInternal) {
			w.c.flush()
		}
	}
	if d := time.Until(t); d > 0 {
		w.timer = time.AfterFunc(d, expire)
		return nil
	}
	expire()
	return nil
}

func (w *responseWriter) stopTimer() {
	w.tmu.Lock()
	if w.timer != nil {
		w.timer.Stop()
	}
	w.tmu.Unlock()
}

// writeChunk writes p, as x/net's server's writeChunk does: the head
// first, with the length when the handler is done before it, and the type
// sniffed; then DATA; then the trailers.
func (w *responseWriter) writeChunk(p []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.handlerDone {
		w.promoteTrailers()
	}
	head := w.req.Method == http.MethodHead
	if !w.sentHeader {
		w.sentHeader = true
		if err := w.writeHead(p, head); err != nil || w.endedByHead(p, head) {
			w.err = err
			return err
		}
	}
	if head || len(p) == 0 && !w.handlerDone {
		return nil
	}
	nonempty := w.hasNonemptyTrailers()
	end := w.handlerDone && !nonempty
	if len(p) > 0 || end {
		if err := w.st.writeData(p, end); err != nil {
			w.err = errors.New("http2: stream closed")
			return w.err
		}
	}
	if w.handlerDone && nonempty {
		fields := make([]hpack.HeaderField, 0, len(w.trailers))
		for _, k := range w.trailers {
			name := strings.ToLower(k)
			for _, v := range w.h[k] {
				if validFieldName(name) && validFieldValue(v) {
					fields = append(fields, hpack.HeaderField{Name: name, Value: v})
				}
			}
		}
		return w.st.writeHeaders(fields, true)
	}
	return nil
}

func (w *responseWriter) endedByHead(p []byte, head bool) bool {
	return w.handlerDone && !w.hasTrailers() && len(p) == 0 || head
}

// writeHead writes the response's HEADERS.
func (w *responseWriter) writeHead(p []byte, head bool) error {
	h := w.snap
	var ctype, clen string
	if clen = h.Get("Content-Length"); clen != "" {
		h.Del("Content-Length")
		if _, err := strconv.ParseUint(clen, 10, 63); err != nil {
			clen = ""
		}
	}
	if _, ok := h["Content-Length"]; !ok && clen == "" && w.handlerDone && bodyAllowed(w.status) && (len(p) > 0 || !head) {
		clen = strconv.Itoa(len(p))
	}
	if _, ok := h["Content-Type"]; !ok && h.Get("Content-Encoding") == "" && bodyAllowed(w.status) && len(p) > 0 {
		ctype = http.DetectContentType(p)
	}
	date := ""
	if _, ok := h["Date"]; !ok {
		date = w.c.s.dateValue()
	}
	for _, v := range h["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			w.declareTrailer(textTrim(k))
		}
	}
	if _, ok := h["Connection"]; ok {
		v := h.Get("Connection")
		delete(h, "Connection")
		if v == "close" {
			w.c.goAway(http2.ErrCodeNo)
		}
	}
	fields := appendHeaderMap(nil, w.status, h, ctype, clen, date)
	return w.st.writeHeaders(fields, w.endedByHead(p, head))
}

// badTrailers are the fields a trailer may not carry (httpguts'
// ValidTrailerHeader).
var badTrailers = []string{
	"Authorization", "Cache-Control", "Connection", "Content-Encoding", "Content-Length", "Content-Range",
	"Content-Type", "Expect", "Host", "Keep-Alive", "Max-Forwards", "Pragma", "Proxy-Authenticate",
	"Proxy-Authorization", "Proxy-Connection", "Range", "Realm", "Te", "Trailer", "Transfer-Encoding", "Www-Authenticate",
}

func (w *responseWriter) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if k == "" || slices.Contains(badTrailers, k) || slices.Contains(w.trailers, k) {
		return
	}
	w.trailers = append(w.trailers, k)
}

// promoteTrailers declares the trailers a handler set with
// http.TrailerPrefix.
func (w *responseWriter) promoteTrailers() {
	for k, vv := range w.h {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		key := strings.TrimPrefix(k, http.TrailerPrefix)
		w.declareTrailer(key)
		w.h[http.CanonicalHeaderKey(key)] = vv
	}
	if len(w.trailers) > 1 {
		slices.Sort(w.trailers)
	}
}

func (w *responseWriter) hasTrailers() bool { return len(w.trailers) > 0 }

func (w *responseWriter) hasNonemptyTrailers() bool {
	for _, k := range w.trailers {
		if _, ok := w.h[k]; ok {
			return true
		}
	}
	return false
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == http.StatusNoContent || status == http.StatusNotModified)
}
