package rls

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper/internal/ratefields"
)

// maxBody bounds a JSON request.
const maxBody = 1 << 20

// HTTPHandler serves the JSON API:
//
//   - POST /v1/check: ratekeeper's JSON (CheckRequest, CheckResponse).
//   - POST /v1/peek: the same, taking nothing (see Peek), always 200.
//   - POST /json: the reference service's endpoint, a RateLimitRequest in
//     the proto3 JSON mapping, answered with a RateLimitResponse likewise.
//   - GET /healthcheck: 200 while serving (the reference service's path).
//
// Both decision endpoints answer 200 when the request may pass, 429 when
// it is over the limit, 400 for a bad request and 503 when the store fails.
// A 503 has an error body when the store's failure leaves no answer. When
// the store's failure policy refused the request, it has the answer
// (OVER_LIMIT) and Retry-After (see Decide).
func (s *Service) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", s.serveCheck)
	mux.HandleFunc("POST /v1/peek", s.serveCheck)
	mux.HandleFunc("POST /json", s.serveJSON)
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "OK\n")
	})
	return mux
}

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	// Domain names the configuration's domain.
	Domain string `json:"domain"`
	// Descriptors are checked together.
	Descriptors []CheckDescriptor `json:"descriptors"`
	// HitsAddend is the cost of the request (0 means 1), for descriptors
	// that do not set their own.
	HitsAddend uint32 `json:"hits_addend,omitempty"`
}

// CheckDescriptor is one descriptor of a CheckRequest.
type CheckDescriptor struct {
	// Entries are the descriptor's key/value pairs, outermost first.
	Entries []CheckEntry `json:"entries"`
	// HitsAddend, when set, is this descriptor's cost instead of the
	// request's.
	HitsAddend *uint64 `json:"hits_addend,omitempty"`
}

// CheckEntry is one key/value pair.
type CheckEntry struct {
	// Key is the entry's key.
	Key string `json:"key"`
	// Value is the entry's value.
	Value string `json:"value"`
}

// CheckResponse is the answer of POST /v1/check.
type CheckResponse struct {
	// OverallCode is "OK" or "OVER_LIMIT".
	OverallCode string `json:"overall_code"`
	// Statuses has one status per descriptor, in order.
	Statuses []CheckStatus `json:"statuses"`
	// Headers are the rate limit headers, when the service adds them.
	Headers map[string]string `json:"headers,omitempty"`
}

// CheckStatus is the answer for one descriptor.
type CheckStatus struct {
	// Code is "OK" or "OVER_LIMIT".
	Code string `json:"code"`
	// CurrentLimit is the limit that applied; absent when none did.
	CurrentLimit *CheckLimit `json:"current_limit,omitempty"`
	// LimitRemaining is how many more requests would pass now, at most
	// the limit's requests_per_unit (4294967295 for an unlimited
	// descriptor).
	LimitRemaining uint32 `json:"limit_remaining"`
	// DurationUntilReset is, in whole seconds, how long until the limit is
	// replenished when allowed, or until the request would pass when over.
	DurationUntilReset float64 `json:"duration_until_reset"`
	// Fallback says that the store did not answer and its failure policy
	// (--store-on-error allow or deny) decided without counting: Code is
	// the policy's, CurrentLimit is absent, and LimitRemaining and
	// DurationUntilReset are zero and mean nothing.
	Fallback bool `json:"fallback,omitempty"`
	// CostAboveLimit says that the descriptor's cost (hits_addend) is more
	// than its limit can ever allow. Code is OVER_LIMIT, nothing was taken,
	// and LimitRemaining is what is left. DurationUntilReset is zero: no
	// wait lets the request pass, so the answer carries no Retry-After.
	CostAboveLimit bool `json:"cost_above_limit,omitempty"`
}

// CheckLimit is a limit as configured.
type CheckLimit struct {
	// Name is the limit's name, if it has one.
	Name string `json:"name,omitempty"`
	// RequestsPerUnit is the number of requests per unit.
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	// Unit is SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR.
	Unit string `json:"unit"`
	// UnitMultiplier is how many units the period is, when a descriptor's
	// limit override set more than one.
	UnitMultiplier uint32 `json:"unit_multiplier,omitempty"`
}

// readCheck reads a CheckRequest body as the RateLimitRequest it stands for.
func readCheck(w http.ResponseWriter, r *http.Request) (*rlsv3.RateLimitRequest, error) {
	var in CheckRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	req := &rlsv3.RateLimitRequest{Domain: in.Domain, HitsAddend: in.HitsAddend}
	for _, d := range in.Descriptors {
		pd := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range d.Entries {
			pd.Entries = append(pd.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		if d.HitsAddend != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.HitsAddend)
		}
		req.Descriptors = append(req.Descriptors, pd)
	}
	return req, nil
}

func (s *Service) serveCheck(w http.ResponseWriter, r *http.Request) {
	req, err := readCheck(w, r)
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	op := decideOp
	if r.URL.Path == "/v1/peek" {
		op = peekOp
	}
	resp, o, err := s.answer(r.Context(), req, op)
	if err != nil {
		decideError(w, err)
		return
	}
	out := CheckResponse{OverallCode: resp.OverallCode.String(), Statuses: make([]CheckStatus, len(resp.Statuses))}
	for i, st := range resp.Statuses {
		cs := CheckStatus{Code: st.Code.String(), LimitRemaining: st.LimitRemaining, DurationUntilReset: st.DurationUntilReset.AsDuration().Seconds()}
		cs.Fallback = o.uncounted != nil && o.uncounted[i]
		cs.CostAboveLimit = o.tooMany != nil && o.tooMany[i]
		if l := st.CurrentLimit; l != nil {
			cs.CurrentLimit = &CheckLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit.String(), UnitMultiplier: l.GetUnitMultiplier().GetValue()}
		}
		out.Statuses[i] = cs
	}
	for _, h := range resp.ResponseHeadersToAdd {
		if out.Headers == nil {
			out.Headers = map[string]string{}
		}
		out.Headers[h.Key] = h.Value
	}
	b, err := json.Marshal(out)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	if op == peekOp {
		// A peek is answered, never refused: 200 whatever the codes say.
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
		return
	}
	writeDecision(w, resp, o, "application/json", b)
}

func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("body: %w", err))
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("body: %w", err))
		return
	}
	resp, o, err := s.answer(r.Context(), &req, decideOp)
	if err != nil {
		decideError(w, err)
		return
	}
	b, err := protojson.Marshal(resp)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	writeDecision(w, resp, o, "application/json", b)
}

// writeDecision writes b with 200, or 429 when over the limit, and the
// rate limit headers the response carries; or, when the store's failure
// policy and no limit refused the request, 503 with its Retry-After.
func writeDecision(w http.ResponseWriter, resp *rlsv3.RateLimitResponse, o notes, ctype string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	for _, hv := range resp.ResponseHeadersToAdd {
		h.Set(hv.Key, hv.Value)
	}
	code := http.StatusOK
	switch {
	case o.refused > 0:
		code = http.StatusServiceUnavailable
		h.Set("Retry-After", strconv.FormatInt(ratefields.Ceil(o.refused), 10))
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		code = http.StatusTooManyRequests
	}
	w.WriteHeader(code)
	w.Write(b)
}

func decideError(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrInvalid) {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	httpError(w, http.StatusServiceUnavailable, err)
}

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"error": strings.TrimSpace(err.Error())})
	w.Write(b)
}
