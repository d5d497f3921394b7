package gateway

import (
	"encoding/json"
	"math"
	"regexp"
	"testing"
	"time"
)

// The reset answers the counter's state after the reset, which the next
// state shows too: not the zeros of an empty answer.
func TestAdminResetAnswersTheStateAfter(t *testing.T) {
	g := adminGateway(t, "admin: {reset: true, token_file: TOKEN}")
	for range 3 {
		clientGet(g, "192.0.2.1", "/v1/x")
	}
	w := adminDo(g, "POST", "/v1/rules/per-ip/reset?ip=192.0.2.1&path=/v1/x", adminToken)
	var got AdminState
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 {
		t.Fatalf("reset: %d %s", w.Code, w.Body)
	}
	if !got.Reset || got.Allowed == nil || !*got.Allowed || got.Limit != 2 || got.Remaining != 2 || got.RetryAfter != 0 || !got.Matches {
		t.Errorf("reset answered %s, want reset, allowed, limit 2, remaining 2", w.Body)
	}
	after := state(t, g, "ip=192.0.2.1&path=/v1/x")
	got.Reset = false
	if got.Allowed == nil || *after.Allowed != *got.Allowed || after.Limit != got.Limit || after.Remaining != got.Remaining || after.Key != got.Key {
		t.Errorf("the reset answered %+v, the state after it is %+v", got, after)
	}
}

// Durations in the admin's JSON are seconds rounded up to the millisecond:
// 1.949, not 1.9484270000000001.
func TestAdminDurationsInMilliseconds(t *testing.T) {
	g := adminGateway(t, "admin: {reset: true, token_file: TOKEN}")
	for range 3 {
		clientGet(g, "192.0.2.1", "/v1/x")
	}
	clean := regexp.MustCompile(`^-?\d+(\.\d{1,3})?$`)
	field := regexp.MustCompile(`"(\w+_seconds)": ([^,\n]+)`)
	for _, target := range []string{"/v1/rules/per-ip/state?ip=192.0.2.1&path=/v1/x", "/v1/rules"} {
		w := adminDo(g, "GET", target, "")
		fields := field.FindAllStringSubmatch(w.Body.String(), -1)
		if w.Code != 200 || len(fields) == 0 {
			t.Fatalf("%s: %d %s", target, w.Code, w.Body)
		}
		for _, f := range fields {
			if !clean.MatchString(f[2]) {
				t.Errorf("%s: %s is %s, want seconds with at most 3 decimals", target, f[1], f[2])
			}
		}
	}
	if st := state(t, g, "ip=192.0.2.1&path=/v1/x"); st.RetryAfter <= 0 || st.RetryAfter > 3600 {
		t.Errorf("retry_after_seconds %v, want within the hour's window", st.RetryAfter)
	}
}

func TestAdminSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want float64
	}{
		{0, 0},
		{time.Nanosecond, 0.001},
		{1948427 * time.Microsecond, 1.949},
		{time.Millisecond, 0.001},
		{time.Millisecond + 1, 0.002},
		{250 * time.Millisecond, 0.25},
		{time.Hour, 3600},
		{-1500 * time.Microsecond, -0.001},
		{time.Duration(math.MaxInt64), 9223372036.855},
	} {
		if got := seconds(tc.d); got != tc.want {
			t.Errorf("seconds(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}
