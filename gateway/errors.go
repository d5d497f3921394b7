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
	b, _ := json.Marshal(httplimit.Problem{
		Type:   "about:blank",
		Title:  "Bad Gateway",
		Status: http.StatusBadGateway,
		Detail: fmt.Sprintf("the upstream %s is unreachable: %v", upstream, err),
	})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(http.StatusBadGateway)
	_, _ = w.Write(append(b, '\n'))
}
