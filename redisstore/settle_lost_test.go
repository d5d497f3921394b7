package redisstore

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/rules"
)

// TestSettleWithLostRefundReplyRunsOnce: a request reserves its body's
// max_tokens (400); its response reports 100, so settling refunds 300.
// Redis runs that refund, but the reply is lost on the way back. The
// refund is not sent again: the key holds 1000-100, not the 1000 (capped)
// of a refund made twice, nor the 600 of none.
func TestSettleWithLostRefundReplyRunsOnce(t *testing.T) {
	s, p := lossyStore(t)
	c, err := rules.Parse("f.yaml", []byte(`rules:
  - name: tpd
    key: [header:X-User]
    cost: {response_json: usage.total_tokens, max: 1000, default: 10, reserve: {request_json: max_tokens, default: 500}}
    limit: {algorithm: token_bucket, rate: 1000, period: 24h}
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	mw, err := httplimit.New(s, set, httplimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	script := s.scripts[algoIndex(ratekeeper.TokenBucket)].Hash()
	lose := false
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lose {
			p.drop(script) // after admission: the settle's refund is the next run
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"total_tokens":`+r.URL.Query().Get("tokens")+`}}`)
	}))
	do := func(maxTokens, tokens int) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/?tokens="+strconv.Itoa(tokens), bytes.NewReader([]byte(`{"max_tokens":`+strconv.Itoa(maxTokens)+`}`)))
		r.Header.Set("X-User", "ann")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	lose = true
	if w := do(400, 100); w.Code != 200 || w.Header().Get(httplimit.HeaderRemaining) != "600" {
		t.Fatalf("reserving 400 of 1000: %d, remaining %s", w.Code, w.Header().Get(httplimit.HeaderRemaining))
	}
	lose = false
	if sent := p.sends(); sent != 1 {
		t.Errorf("the refund went to Redis %d times, want once", sent)
	}
	if !bytes.Contains(logs.Bytes(), []byte("failed charging a response's cost")) {
		t.Errorf("the lost reply was not logged: %s", logs.Bytes())
	}
	// Refunded once: 900 left, less this probe's reserve of 1 (and at most
	// a token refilled meanwhile).
	w := do(1, 0)
	if n, _ := strconv.Atoi(w.Header().Get(httplimit.HeaderRemaining)); n != 899 && n != 900 {
		t.Errorf("after a settle refunding 300 of 400: remaining %d, want 899 (a refund made once)", n)
	}
}
