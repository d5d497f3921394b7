package httplimit

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/ratefields"
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
//
// A decision that counted nothing (ratekeeper.FallbackUncounted: the store
// was down and its failure policy decided) has no remaining and no reset
// to report. Its rule keeps X-RateLimit-Limit (as the rule's capacity) and
// its RateLimit-Policy item, which are configuration. It gets no
// X-RateLimit-Remaining, X-RateLimit-Reset or RateLimit item.
func (m *Middleware) writeHeaders(h http.Header, v verdict, s *scratch) {
	style := v.c.style
	if style == rules.HeadersNone || v.worst < 0 || len(s.results) == 0 {
		return
	}
	f := fields{b: s.hb[:0]}
	// A rule with refused.hide_headers is in none of them: when it refused
	// the request, the legacy fields (which are about the refusing rule)
	// are left out too.
	if (style == rules.HeadersBoth || style == rules.HeadersLegacy) && !v.c.rules[s.matches[v.worst].Rule.Index].hide {
		f.legacy(&s.results[v.worst], s.matches[v.worst].Rule)
	}
	if style == rules.HeadersBoth || style == rules.HeadersIETF {
		f.ietf(v.c, s)
	}
	s.hb = f.b
	f.setOn(h)
}

// fields are the values of a response's rate limit header fields, in the
// order of fieldKeys, built one after another in one buffer.
type fields struct {
	b    []byte
	ends [5]int  // value k is b[ends[k-1]:ends[k]]
	set  [5]bool // the fields the response carries
}

// fieldKeys are the header fields that fields holds, in its order.
var fieldKeys = [5]string{canonLimit, canonRemaining, canonReset, canonPolicy, canonRateLimit}

// end marks the end of value k in f's buffer, and whether its field is
// sent.
func (f *fields) end(k int, set bool) { f.ends[k], f.set[k] = len(f.b), set }

// legacy adds the X-RateLimit-* values of rl's decision d. A decision that
// counted nothing has only its limit; a concurrency rule's has no reset.
func (f *fields) legacy(d *ratekeeper.Decision, rl *rules.Rule) {
	counted := d.Fallback != ratekeeper.FallbackUncounted
	reset := counted && !rl.IsConcurrency()
	f.b = strconv.AppendInt(f.b, int64(d.Limit), 10)
	f.end(0, true)
	if counted {
		f.b = strconv.AppendInt(f.b, int64(ratefields.Remaining(*d)), 10)
	}
	f.end(1, counted)
	if reset {
		f.b = strconv.AppendInt(f.b, ratefields.Reset(*d), 10)
	}
	f.end(2, reset)
}

// ietf adds the RateLimit-Policy and RateLimit values of the rules s
// matched. Either is sent only when it has an item; RateLimit only with
// RateLimit-Policy.
func (f *fields) ietf(c *compiled, s *scratch) {
	start := len(f.b)
	f.b = c.appendPolicies(f.b, s)
	f.end(3, len(f.b) > start)
	start = len(f.b)
	f.b = c.appendRateLimits(f.b, s)
	f.end(4, f.set[3] && len(f.b) > start)
}

// setOn sets the fields that f sends on h. Their values are parts of one
// string, and their slices share one backing array.
func (f *fields) setOn(h http.Header) {
	all := string(f.b)
	vals := make([]string, len(f.ends))
	start := 0
	for k, end := range f.ends {
		if f.set[k] {
			vals[k] = all[start:end]
			h[fieldKeys[k]] = vals[k : k+1 : k+1]
		}
		start = end
	}
}

// appendPolicies appends the RateLimit-Policy items of the rules s
// matched, enforced then shadow, hidden rules left out.
func (c *compiled) appendPolicies(b []byte, s *scratch) []byte {
	start := len(b)
	for _, i := range s.allMatches() {
		if c.rules[s.matches[i].Rule.Index].hide {
			continue
		}
		if len(b) > start {
			b = append(b, ", "...)
		}
		b = c.appendPolicy(b, &s.matches[i], s.results[i].At)
	}
	return b
}

// appendRateLimits appends the RateLimit items of the rules s matched,
// enforced then shadow. Hidden rules, and decisions that counted nothing,
// are left out. An allowed concurrency rule has no reset: a slot comes
// back when a request ends.
func (c *compiled) appendRateLimits(b []byte, s *scratch) []byte {
	start := len(b)
	for _, i := range s.allMatches() {
		rl := s.matches[i].Rule
		d := s.results[i]
		if d.Fallback == ratekeeper.FallbackUncounted || c.rules[rl.Index].hide {
			continue
		}
		if len(b) > start {
			b = append(b, ", "...)
		}
		b = append(b, c.rules[rl.Index].quoted...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(ratefields.Remaining(d)), 10)
		if !d.Allowed || !rl.IsConcurrency() {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, ratefields.T(d), 10)
		}
	}
	return b
}

// Problem is the application/problem+json body (RFC 9457) of a 429, a 403
// or a 503.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Rule is the rule that refused the request (none for a 503: no rule
	// did).
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

// writeTooMany answers the refusal of rule (429 unless its refused.status
// says otherwise) with a wait of retry in whole seconds
// (ratefields.RetrySeconds), so that the client is never early; a gRPC
// call gets RESOURCE_EXHAUSTED. With refused.retry_after_jitter, the wait announced
// is retry plus a uniformly random part of the jitter: never less than
// retry. X-RateLimit-Retry-After goes with it unless the rule is hidden.
func writeTooMany(w http.ResponseWriter, r *http.Request, rule *rules.Rule, retry time.Duration, shown bool) {
	f := &rule.Refused
	secs := ratefields.RetrySeconds(retry + jitter(f.Jitter))
	s := strconv.FormatInt(secs, 10)
	w.Header().Set("Retry-After", s)
	if shown {
		w.Header().Set(HeaderRetryAfter, s)
	}
	detail := string(f.AppendDetail(nil, rule.Name, secs))
	if IsGRPC(r) {
		writeGRPC(w, grpcResourceExhausted, detail)
		return
	}
	writeProblem(w, Problem{
		Type:       f.Type,
		Title:      f.Title,
		Status:     f.Status,
		Detail:     detail,
		Rule:       rule.Name,
		RetryAfter: secs,
	})
}

// jitter is a uniformly random duration in [0, max], to the microsecond.
func jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(max/time.Microsecond)+1)) * time.Microsecond
}

// writeBadCost answers 400 for a request whose cost header cannot be read
// (a *rules.CostError, which names the header); a gRPC call gets
// INVALID_ARGUMENT.
func writeBadCost(w http.ResponseWriter, r *http.Request, err error) {
	if IsGRPC(r) {
		writeGRPC(w, grpcInvalidArgument, err.Error())
		return
	}
	writeProblem(w, Problem{
		Type:   "about:blank",
		Title:  "Bad Request",
		Status: http.StatusBadRequest,
		Detail: err.Error(),
	})
}

// writeUnavailable answers 503 for a request that the store could not
// decide and its failure policy refused (failsafe's Deny): the limiter is
// unavailable, the client did not use up a limit. Retry-After is the
// policy's wait, rounded up to whole seconds (at least 1);
// X-RateLimit-Retry-After, a rate limit's figure, is not sent. A gRPC call
// gets UNAVAILABLE.
func writeUnavailable(w http.ResponseWriter, r *http.Request, retry time.Duration) {
	secs := max(ratefields.Ceil(retry), 1)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	detail := fmt.Sprintf("the rate limiter's store is unavailable: retry in %d s", secs)
	if IsGRPC(r) {
		writeGRPC(w, grpcUnavailable, detail)
		return
	}
	writeProblem(w, Problem{
		Type:       "about:blank",
		Title:      "Service Unavailable",
		Status:     http.StatusServiceUnavailable,
		Detail:     detail,
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
	grpcInvalidArgument   = 3
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcUnavailable       = 14
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
