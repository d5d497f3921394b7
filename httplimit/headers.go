package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
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
// whole seconds (at least 1) so that the client is never early.
func writeTooMany(w http.ResponseWriter, rule string, retry time.Duration) {
	secs := max(ceilSeconds(retry), 1)
	s := strconv.FormatInt(secs, 10)
	w.Header().Set("Retry-After", s)
	w.Header().Set(HeaderRetryAfter, s)
	writeProblem(w, Problem{
		Type:       "about:blank",
		Title:      "Too Many Requests",
		Status:     http.StatusTooManyRequests,
		Detail:     fmt.Sprintf("rate limit %q exceeded: retry in %d s", rule, secs),
		Rule:       rule,
		RetryAfter: secs,
	})
}

func writeForbidden(w http.ResponseWriter) {
	writeProblem(w, Problem{
		Type:   "about:blank",
		Title:  "Forbidden",
		Status: http.StatusForbidden,
		Detail: "this client's address is on the deny list",
	})
}
