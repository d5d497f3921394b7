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

// writeHeaders adds the rate limit fields for the rules s matched.
func (m *Middleware) writeHeaders(h http.Header, v verdict, s *scratch) {
	style := v.c.style
	if style == rules.HeadersNone || v.worst < 0 || len(s.results) == 0 {
		return
	}
	if style == rules.HeadersBoth || style == rules.HeadersLegacy {
		d := s.results[v.worst]
		h[canonLimit] = []string{strconv.Itoa(d.Limit)}
		h[canonRemaining] = []string{strconv.Itoa(d.Remaining)}
		h[canonReset] = []string{strconv.FormatInt(ceilSeconds(d.ResetAfter), 10)}
	}
	if style == rules.HeadersBoth || style == rules.HeadersIETF {
		var pol, cur strings.Builder
		add := func(i int) {
			rl := s.matches[i].Rule
			d := s.results[i]
			if pol.Len() > 0 {
				pol.WriteString(", ")
				cur.WriteString(", ")
			}
			pol.WriteString(v.c.rules[rl.Index].policy)
			t := d.ResetAfter
			if !d.Allowed {
				t = d.RetryAfter
			}
			cur.WriteString(strconv.Quote(rl.Name))
			cur.WriteString(";r=")
			cur.WriteString(strconv.Itoa(d.Remaining))
			cur.WriteString(";t=")
			cur.WriteString(strconv.FormatInt(ceilSeconds(t), 10))
		}
		for _, i := range s.enforced {
			add(i)
		}
		for _, i := range s.shadow {
			add(i)
		}
		if pol.Len() > 0 {
			h[canonPolicy] = []string{pol.String()}
			h[canonRateLimit] = []string{cur.String()}
		}
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
