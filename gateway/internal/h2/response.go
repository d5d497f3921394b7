package h2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/ratekeeper/ratekeeper/gateway/internal/h1"
	"github.com/ratekeeper/ratekeeper/gateway/internal/upstream"
)

var contextBackground = context.Background()

// readHead reads the upstream's response head into rs.resp, passing 1xx
// responses on to the client. The final head stays in u's buffer.
func (c *conn) readHead(u *upstream.Conn, st *stream, rs *relayed) error {
	for {
		b, err := u.PeekHead()
		if err != nil {
			return err
		}
		if err := h1.ParseResponse(b, &rs.resp); err != nil {
			return err
		}
		if rs.resp.Code >= 200 {
			rs.respN = len(b)
			return nil
		}
		if rs.resp.Code == http.StatusSwitchingProtocols {
			return errors.New("upstream switched protocols, which the request did not ask for")
		}
		fields := rs.upstreamFields(rs.out[:0], b, false)
		rs.out = fields
		if err := st.writeHeaders(fields, false); err != nil {
			return err
		}
		if err := c.flush(); err != nil {
			return err
		}
		u.R.Discard(len(b))
	}
}

// upstreamFields appends the fields of the upstream's head b: its status,
// and its end-to-end headers with lower-case names. final adds the rate
// limit headers and Date, as the gateway's handler sends them.
func (rs *relayed) upstreamFields(out []hpack.HeaderField, b []byte, final bool) []hpack.HeaderField {
	r := &rs.resp
	out = append(out, hpack.HeaderField{Name: ":status", Value: statusText(r.Code)})
	var trailers []string
	for _, s := range r.Lines {
		if r.Dropped(b, s) {
			continue
		}
		line := h1.TrimEOL(b[s.Start:s.End])
		colon := bytes.IndexByte(line, ':')
		name := rs.lowerName(line[:colon])
		value := bytes.Trim(line[colon+1:], " \t")
		if name == "trailer" {
			if r.Chunked {
				trailers = appendTrailerNames(trailers, value)
			}
			continue
		}
		out = append(out, hpack.HeaderField{Name: name, Value: rs.value(line, value)})
	}
	if len(trailers) > 0 {
		// As ReverseProxy announces them: the names net/http's client read.
		out = append(out, hpack.HeaderField{Name: "trailer", Value: strings.Join(trailers, ", ")})
	}
	if !final {
		return out
	}
	for k, vs := range rs.w.h {
		name := rs.lowerName([]byte(k))
		for _, v := range vs {
			out = append(out, hpack.HeaderField{Name: name, Value: v})
		}
	}
	return out
}

// appendTrailerNames appends the names a Trailer header lists, canonical
// and each once, as net/http's client keeps them.
func appendTrailerNames(names []string, v []byte) []string {
	for n := range strings.SplitSeq(string(v), ",") {
		if n = http.CanonicalHeaderKey(strings.Trim(n, " \t")); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// lowerName returns a header name in lower case; the names of the
// upstream's answers are few, and kept.
func (rs *relayed) lowerName(b []byte) string {
	if n, ok := rs.names[string(b)]; ok {
		return n
	}
	n := strings.ToLower(string(b))
	if len(rs.names) < 256 {
		rs.names[string(b)] = n
	}
	return n
}

// value returns the value v of the upstream's header line as a string:
// the same line as an earlier answer's (a type, a length, the date this
// second) takes its string again.
func (rs *relayed) value(line, v []byte) string {
	if s, ok := rs.values[string(line)]; ok {
		return s
	}
	if len(rs.values) >= 256 {
		clear(rs.values)
	}
	s := string(v)
	rs.values[string(line)] = s
	return s
}

// statusText is the :status value of code.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 304:
		return "304"
	case 404:
		return "404"
	}
	return strconv.Itoa(code)
}

// relayResponse sends the response whose head rs.resp holds, then its
// body, as net/http's HTTP/2 server sends what ReverseProxy writes. u goes
// back to the pool when it can serve again.
func (c *conn) relayResponse(st *stream, rs *relayed, u *upstream.Conn) {
	c.beginWrite()
	defer c.endWrite()
	r := &rs.resp
	head, _ := u.R.Peek(rs.respN)
	fields := rs.upstreamFields(rs.out[:0], head, true)
	bodyless := h1.Bodyless(st.method, r.Code)
	var clen int64 = -1
	switch {
	case bodyless:
		if r.ContentLength >= 0 && r.Code != http.StatusNoContent && r.Code != http.StatusNotModified {
			clen = r.ContentLength
		}
	case r.Chunked:
	case r.ContentLength >= 0:
		clen = r.ContentLength
	}
	if clen >= 0 {
		v := strconv.FormatInt(clen, 10)
		if clen == r.ContentLength && r.ContentLengthSpan.End > 0 {
			v = string(head[r.ContentLengthSpan.Start:r.ContentLengthSpan.End]) // as ReverseProxy copies it
		}
		fields = append(fields, hpack.HeaderField{Name: "content-length", Value: v})
	}
	if !r.HasDate {
		fields = append(fields, hpack.HeaderField{Name: "date", Value: c.s.dateValue()})
	}
	u.R.Discard(rs.respN)
	rs.out = fields
	b := &bodyRelay{c: c, st: st, rs: rs, u: u, fields: fields, clen: clen}
	var err error
	switch {
	case bodyless:
		err = b.end(nil)
	case r.Chunked:
		err = b.copyChunked()
	case r.ContentLength >= 0:
		err = b.copyN(r.ContentLength)
	default:
		err = b.copyToEOF()
	}
	framed := r.ContentLength >= 0 || r.Chunked || bodyless
	if st.up.CompareAndSwap(u, nil) {
		if err != nil {
			u.Close()
		} else {
			u.Release(framed && !r.Close && st.method != http.MethodHead)
		}
	}
	if err != nil {
		// As ReverseProxy's abort makes net/http's server end it.
		c.resetIfOpen(st.id, http2.ErrCodeInternal)
	} else {
		st.finish()
	}
}

// bodyRelay sends a response's head, lazily, and its body as DATA.
type bodyRelay struct {
	c      *conn
	st     *stream
	rs     *relayed
	u      *upstream.Conn
	fields []hpack.HeaderField
	clen   int64
	sent   bool // the head is written
}

// head writes the head before the first of the body, p: its type sniffed
// from p when the upstream gave none, as net/http sniffs it.
func (b *bodyRelay) head(p []byte, end bool) error {
	if b.sent {
		return nil
	}
	b.sent = true
	if len(p) > 0 && b.rs.resp.Code != http.StatusNotModified && !hasField(b.fields, "content-type") && !hasField(b.fields, "content-encoding") {
		b.fields = append(b.fields, hpack.HeaderField{Name: "content-type", Value: http.DetectContentType(p)})
	}
	if end && len(p) == 0 && b.clen < 0 && !h1.Bodyless(b.st.method, b.rs.resp.Code) {
		// What net/http's server says of a body that ended before it
		// sent the head.
		b.fields = append(b.fields, hpack.HeaderField{Name: "content-length", Value: "0"})
	}
	b.rs.out = b.fields
	return b.st.writeHeaders(b.fields, end && len(p) == 0)
}

// data sends p, the last of the body when end.
func (b *bodyRelay) data(p []byte, end bool) error {
	if !b.sent {
		if err := b.head(p, end); err != nil || end && len(p) == 0 {
			return err // the head ended the stream
		}
	}
	if len(p) == 0 && !end {
		return nil
	}
	return b.st.writeData(p, end)
}

// end ends the stream after the body, with trailers if any.
func (b *bodyRelay) end(trailers []hpack.HeaderField) error {
	if len(trailers) == 0 {
		return b.data(nil, true)
	}
	if !b.sent {
		if err := b.head(nil, false); err != nil {
			return err
		}
	}
	return b.st.writeHeaders(trailers, true)
}

// fill returns what u has buffered, reading more when there is nothing;
// what the client is owed is flushed first, so that a stream reaches it
// as it comes.
func (b *bodyRelay) fill() ([]byte, error) {
	u := b.u
	if u.R.Buffered() == 0 {
		if err := b.c.flush(); err != nil {
			return nil, err
		}
		if _, err := u.R.Peek(1); err != nil {
			return nil, err
		}
	}
	return u.R.Peek(u.R.Buffered())
}

func (b *bodyRelay) copyN(n int64) error {
	if n == 0 {
		return b.end(nil)
	}
	return b.relayN(n, true)
}

// relayN sends the next n bytes of the upstream's body as DATA, the last
// of them ending the stream if ends.
func (b *bodyRelay) relayN(n int64, ends bool) error {
	for n > 0 {
		p, err := b.fill()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if int64(len(p)) > n {
			p = p[:n]
		}
		n -= int64(len(p))
		if err := b.data(p, ends && n == 0); err != nil {
			return err
		}
		b.u.R.Discard(len(p))
	}
	return nil
}

func (b *bodyRelay) copyToEOF() error {
	for {
		p, err := b.fill()
		if err == io.EOF {
			return b.end(nil)
		}
		if err != nil {
			return err
		}
		if err := b.data(p, false); err != nil {
			return err
		}
		b.u.R.Discard(len(p))
	}
}

// copyChunked sends a chunked body's data, then its trailer fields as
// trailers, checking its framing as the fast path does.
func (b *bodyRelay) copyChunked() error {
	for {
		line, err := b.line()
		if err != nil {
			return err
		}
		size, _, err := h1.ChunkSize(line)
		if err != nil {
			return err
		}
		if size == 0 {
			break
		}
		if err := b.chunk(size); err != nil {
			return err
		}
		crlf, err := b.line()
		if err != nil {
			return err
		}
		if string(crlf) != "\r\n" {
			return h1.ErrBadChunk
		}
	}
	var trailers []hpack.HeaderField
	for {
		line, err := b.line()
		if err != nil {
			return err
		}
		field := h1.TrimEOL(line)
		if len(field) == 0 {
			return b.end(trailers)
		}
		ok, drop := h1.TrailerField(field)
		if !ok {
			return h1.ErrBadChunk
		}
		colon := bytes.IndexByte(field, ':')
		if !drop && !forbiddenTrailer(field[:colon]) {
			trailers = append(trailers, hpack.HeaderField{Name: strings.ToLower(string(field[:colon])), Value: string(bytes.Trim(field[colon+1:], " \t"))})
		}
	}
}

// forbiddenTrailer reports whether an upstream's trailer field name is one
// net/http's server does not send as a trailer, or Upgrade, which HTTP/2
// forbids (RFC 9113, 8.2.2).
func forbiddenTrailer(name []byte) bool {
	k := http.CanonicalHeaderKey(string(name))
	return k == "Upgrade" || slices.Contains(badTrailers, k)
}

// chunk sends one chunk's data.
func (b *bodyRelay) chunk(n int64) error { return b.relayN(n, false) }

// line reads one line of a chunked body, with its line end; what the
// client is owed is flushed before a wait.
func (b *bodyRelay) line() ([]byte, error) {
	if p, _ := b.u.R.Peek(b.u.R.Buffered()); bytes.IndexByte(p, '\n') < 0 { // it may wait
		if err := b.c.flush(); err != nil {
			return nil, err
		}
	}
	p, err := b.u.R.ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, h1.ErrBadChunk
	}
	return p, nil
}

func hasField(fields []hpack.HeaderField, name string) bool {
	for _, f := range fields {
		if f.Name == name {
			return true
		}
	}
	return false
}

// dateIfNone is the Date value to add to a header map without one.
func (s *Server) dateIfNone(h http.Header) string {
	if _, ok := h["Date"]; ok {
		return ""
	}
	return s.dateValue()
}

// appendHeaderMap appends a response's fields as x/net/http2's server
// encodes a handler's: :status, the map's keys in order and in lower case
// (without invalid fields, and Transfer-Encoding but "trailers"), then
// Content-Type, Content-Length and Date when given.
func appendHeaderMap(out []hpack.HeaderField, status int, h http.Header, ctype, clen, date string) []hpack.HeaderField {
	if status != 0 {
		out = append(out, hpack.HeaderField{Name: ":status", Value: statusText(status)})
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.ToLower(k)
		if !validFieldName(name) {
			continue
		}
		for _, v := range h[k] {
			if !validFieldValue(v) || name == "transfer-encoding" && v != "trailers" {
				continue
			}
			out = append(out, hpack.HeaderField{Name: name, Value: v})
		}
	}
	for _, f := range [...]hpack.HeaderField{{Name: "content-type", Value: ctype}, {Name: "content-length", Value: clen}, {Name: "date", Value: date}} {
		if f.Value != "" {
			out = append(out, f)
		}
	}
	return out
}

// validFieldName reports whether name may go on the wire: a token, in
// lower case.
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 0x80 || 'A' <= c && c <= 'Z' || !h1.IsToken(name[i:i+1]) {
			return false
		}
	}
	return true
}

// validFieldValue reports whether v may go on the wire, as httpguts says.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
