// Package problem writes the gateway's own answers, as problem+json bodies
// (RFC 9457), the same on every client path.
package problem

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ratekeeper/ratekeeper/httplimit"
)

// BadGateway answers 502 with a problem+json body naming the upstream and
// what went wrong.
func BadGateway(w http.ResponseWriter, upstream string, err error) {
	Write(w, http.StatusBadGateway, "Bad Gateway", fmt.Sprintf("the upstream %s is unreachable: %v", upstream, err))
}

// Write answers status with a problem+json body (RFC 9457).
func Write(w http.ResponseWriter, status int, title, detail string) {
	b, _ := json.Marshal(httplimit.Problem{Type: "about:blank", Title: title, Status: status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
