package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/rules"
)

// Header names.
const (
	HeaderLimit      = "X-RateLimit-Limit"
	HeaderRemaining  = "X-RateLimit-Remaining"
	HeaderReset      = "X-RateLimit-Reset"
	HeaderRetryAfter = "X-RateLimit-Retry-After"
	HeaderPolicy     = "RateLimit-Policy"
	HeaderRateLimit  = "RateLimit"
)

// Canonical forms, for writing to the header map directly.
var (
	canonLimit     = http.CanonicalHeaderKey(HeaderLimit)
	canonRemaining = http.CanonicalHeaderKey(HeaderRemaining)
	canonReset     = http.CanonicalHeaderKey(HeaderReset)
	canonPolicy    = http.CanonicalHeaderKey(HeaderPolicy)
	canonRateLimit = http.CanonicalHeaderKey(HeaderRateLimit)
)

// writeHeaders adds the rate limit fields for the rules s matched. The
// values are built one after another in s's buffer and become one string,
// and the header slices share one backing array: a response costs two
// allocations, whatever the number of rules.
func (m *Middleware) writeHeaders(h http.Header, v verdict, s *scratch) {
	style := v.c.style
	if style == rules.HeadersNone || v.worst < 0 || len(s.results) == 0 {
		return
	}
	legacy := style == rules.HeadersBoth || style == rules.HeadersLegacy
	ietf := style == rules.HeadersBoth || style == rules.HeadersIETF
	b := s.hb[:0]
	var ends [5]int
	if legacy {
		d := s.results[v.worst]
		b = strconv.AppendInt(b, int64(d.Limit), 10)
		ends[0] = len(b)
		b = strconv.AppendInt(b, int64(d.Remaining), 10)
		ends[1] = len(b)
		b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
		ends[2] = len(b)
	}
	if ietf {
		for n, i := range s.allMatches() {
			if n > 0 {
				b = append(b, ", "...)
			}
			b = append(b, v.c.rules[s.matches[i].Rule.Index].policy...)
		}
		ends[3] = len(b)
		for n, i := range s.allMatches() {
			rl := s.matches[i].Rule
			d := s.results[i]
			if n > 0 {
				b = append(b, ", "...)
			}
			t := d.ResetAfter
			if !d.Allowed {
				t = d.RetryAfter
			}
			b = append(b, v.c.rules[rl.Index].quoted...)
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, int64(d.Remaining), 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, ceilSeconds(t), 10)
		}
		ends[4] = len(b)
	}
	s.hb = b
	all := string(b)
	vals := make([]string, 5)
	if legacy {
		vals[0], vals[1], vals[2] = all[:ends[0]], all[ends[0]:ends[1]], all[ends[1]:ends[2]]
		h[canonLimit] = vals[0:1:1]
		h[canonRemaining] = vals[1:2:2]
		h[canonReset] = vals[2:3:3]
	}
	if ietf && ends[3] > ends[2] {
		vals[3], vals[4] = all[ends[2]:ends[3]], all[ends[3]:ends[4]]
		h[canonPolicy] = vals[3:4:4]
		h[canonRateLimit] = vals[4:5:5]
	}
}

// Problem is the application/problem+json body (RFC 9457) of a 429 or 403.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Rule is the rule that refused the request.
	Rule string `json:"rule,omitempty"`
	// RetryAfter is the wait in whole seconds, as in Retry-After.
	RetryAfter int64 `json:"retry_after,omitempty"`
}

func writeProblem(w http.ResponseWriter, p Problem) {
	b, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}

// writeTooMany answers 429 for rule with a wait of retry, rounded up to
// whole seconds (at least 1) so that the client is never early; a gRPC
// call gets RESOURCE_EXHAUSTED.
func writeTooMany(w http.ResponseWriter, r *http.Request, rule string, retry time.Duration) {
	secs := max(ceilSeconds(retry), 1)
	s := strconv.FormatInt(secs, 10)
	w.Header().Set("Retry-After", s)
	w.Header().Set(HeaderRetryAfter, s)
	if IsGRPC(r) {
		writeGRPC(w, grpcResourceExhausted, fmt.Sprintf("rate limit %q exceeded: retry in %d s", rule, secs))
		return
	}
	writeProblem(w, Problem{
		Type:       "about:blank",
		Title:      "Too Many Requests",
		Status:     http.StatusTooManyRequests,
		Detail:     fmt.Sprintf("rate limit %q exceeded: retry in %d s", rule, secs),
		Rule:       rule,
		RetryAfter: secs,
	})
}

func writeForbidden(w http.ResponseWriter, r *http.Request) {
	if IsGRPC(r) {
		writeGRPC(w, grpcPermissionDenied, "this client's address is on the deny list")
		return
	}
	writeProblem(w, Problem{
		Type:   "about:blank",
		Title:  "Forbidden",
		Status: http.StatusForbidden,
		Detail: "this client's address is on the deny list",
	})
}

// IsGRPC reports whether r is a gRPC call: HTTP/2 with a Content-Type of
// application/grpc or one of its forms (application/grpc+proto). A
// refused call is answered as gRPC clients expect, not with a 429:
// status 200 with grpc-status and grpc-message and no body (a
// "trailers-only" response), the rate limit fields beside them as
// response metadata.
func IsGRPC(r *http.Request) bool {
	if r.ProtoMajor != 2 {
		return false
	}
	ct := r.Header.Get("Content-Type")
	const grpc = "application/grpc"
	if len(ct) < len(grpc) || !strings.EqualFold(ct[:len(grpc)], grpc) {
		return false
	}
	return len(ct) == len(grpc) || ct[len(grpc)] == '+' || ct[len(grpc)] == ';'
}

// gRPC status codes (google.golang.org/grpc/codes), which this package
// does not import.
const (
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
)

// writeGRPC answers a gRPC call with status code and msg, in the headers
// of a response without a body, which HTTP/2 sends as one HEADERS frame
// that ends the stream.
func writeGRPC(w http.ResponseWriter, code int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(code))
	h.Set("Grpc-Message", grpcPercentEncode(msg))
	w.WriteHeader(http.StatusOK)
}

// grpcPercentEncode encodes msg as grpc-message wants it: bytes outside
// printable ASCII, and '%', as %XX.
func grpcPercentEncode(msg string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
