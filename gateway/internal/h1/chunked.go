package h1

import (
	"bytes"
	"math"
)

// ChunkSize reads a chunk-size line as net/http's client does. The line
// ends with CRLF and has no other CR; a bare LF there is refused (RFC 9112
// errata 7633). Trailing white space is trimmed and any extension (from
// ';') ignored. One to sixteen hex digits must remain. It returns their
// value, and the line to pass on: the digits without the extension, as
// ReverseProxy passes it.
func ChunkSize(line []byte) (int64, []byte, error) {
	if len(line) < 2 || bytes.IndexByte(line, '\r') != len(line)-2 || line[len(line)-1] != '\n' {
		return 0, nil, ErrBadChunk
	}
	b := line[:len(line)-2]
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	if i := bytes.IndexByte(b, ';'); i >= 0 {
		b = b[:i]
	}
	if len(b) == 0 || len(b) > 16 {
		return 0, nil, ErrBadChunk
	}
	var n uint64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, nil, ErrBadChunk
		}
		n = n<<4 | uint64(c)
	}
	if n > math.MaxInt64 {
		return 0, nil, ErrBadChunk // a body no upstream can send
	}
	return int64(n), b, nil
}

// TrailerField reports whether b is a field line: a token, a colon, and a
// value of the bytes a header value may hold. A name with spaces in it (not
// first) is one net/http's client takes and its server does not send: drop.
func TrailerField(b []byte) (ok, drop bool) {
	colon := 0
	for colon < len(b) && (tokenChar[b[colon]] || colon > 0 && b[colon] == ' ') {
		drop = drop || b[colon] == ' '
		colon++
	}
	if colon == 0 || colon == len(b) || b[colon] != ':' {
		return false, false
	}
	for _, c := range b[colon+1:] {
		if !fieldValueChar[c] {
			return false, false
		}
	}
	return true, drop
}
