package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ratekeeper/ratekeeper/httplimit"
)

// writeBadGateway answers 502 with a problem+json body naming the upstream
// and what went wrong.
func writeBadGateway(w http.ResponseWriter, upstream string, err error) {
	writeProblem(w, http.StatusBadGateway, "Bad Gateway", fmt.Sprintf("the upstream %s is unreachable: %v", upstream, err))
}

// writeProblem answers status with a problem+json body (RFC 9457).
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	b, _ := json.Marshal(httplimit.Problem{Type: "about:blank", Title: title, Status: status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
