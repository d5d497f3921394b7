package rules

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

const countOnlyLimit = "    limit: {algorithm: fixed_window, rate: 10, period: 1d}\n"

func TestCountOnlyParsed(t *testing.T) {
	c, err := Parse("c.yaml", []byte("rules:\n  - name: accounts\n    key: ip\n"+countOnlyLimit+"    count_only: {status: [201, 4xx, 5XX]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	st := set.Rules[0].CountOnly
	for code, want := range map[int]bool{201: true, 200: false, 202: false, 400: true, 499: true, 500: true, 599: true, 399: false, 100: false, 600: false, 99: false, -1: false} {
		if st.Has(code) != want {
			t.Errorf("Has(%d) = %t, want %t", code, !want, want)
		}
	}
}

// Every refusal names the file, the line and the field.
func TestCountOnlyRefused(t *testing.T) {
	rule := "rules:\n  - name: a\n"
	for _, c := range []struct{ yaml, want string }{
		{rule + countOnlyLimit + "    count_only: {status: [6xx]}\n", `f.yaml:4: rules[0].count_only.status[0]: "6xx" is not a status`},
		{rule + countOnlyLimit + "    count_only: {status: [201, abc]}\n", `f.yaml:4: rules[0].count_only.status[1]: "abc" is not a status`},
		{rule + countOnlyLimit + "    count_only:\n      status:\n        - 201\n        - 99\n", `f.yaml:7: rules[0].count_only.status[1]: "99" is not a status`},
		{rule + countOnlyLimit + "    count_only: {status: [1000]}\n", `rules[0].count_only.status[0]: "1000" is not a status`},
		{rule + countOnlyLimit + "    count_only: {status: []}\n", "f.yaml:4: rules[0].count_only.status: no status"},
		{rule + countOnlyLimit + "    count_only: {}\n", "rules[0].count_only.status: no status"},
		{rule + countOnlyLimit + "    count_only: {statuses: [201]}\n", "rules[0].count_only.statuses: unknown field"},
		{rule + "    mode: queue\n    limit: {algorithm: leaky_bucket, rate: 10, period: 1s}\n    count_only: {status: [201]}\n", "f.yaml:5: rules[0].count_only: a queued request"},
		{rule + "    mode: shadow\n" + countOnlyLimit + "    count_only: {status: [201]}\n", "f.yaml:5: rules[0].count_only: a shadow rule"},
		{rule + "    concurrency: {max: 2}\n    count_only: {status: [201]}\n", "f.yaml:4: rules[0].count_only: a concurrency rule"},
		{rule + "    cost: 2\n" + countOnlyLimit + "    count_only: {status: [201]}\n", "f.yaml:5: rules[0].count_only: a counted response takes one unit"},
	} {
		_, err := Parse("f.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Errorf("%q: %T is not an *Error", c.yaml, err)
		}
	}
}

func TestParseStatuses(t *testing.T) {
	if _, err := ParseStatuses(); err == nil {
		t.Error("an empty list parsed")
	}
	s, err := ParseStatuses("201", "3xx")
	if err != nil || !s.Has(201) || !s.Has(302) || s.Has(200) {
		t.Errorf("%v %v", s, err)
	}
	for _, bad := range []string{"", "abc", "6xx", "0xx", "99", "600", "+201", "0201", "2x1", "20x", " 201", "-1"} {
		if _, err := ParseStatuses(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzParseStatus: a status parses iff it is a code 100..599 written in
// three digits or a class 1xx..5xx, and the set then holds exactly it.
func FuzzParseStatus(f *testing.F) {
	for _, s := range []string{"201", "4xx", "5XX", "6xx", "99", "abc", "1000", "+201", "０201"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var s Statuses
		err := s.ParseStatus(v)
		n, nerr := strconv.Atoi(v)
		code := nerr == nil && len(v) == 3 && v[0] != '+' && v[0] != '-' && n >= 100 && n <= 599
		class := len(v) == 3 && v[0] >= '1' && v[0] <= '5' && strings.EqualFold(v[1:], "xx")
		if (err == nil) != (code || class) {
			t.Fatalf("%q: err %v, code %t, class %t", v, err, code, class)
		}
		if err != nil {
			if !s.IsZero() {
				t.Fatalf("%q: refused but the set is not empty", v)
			}
			return
		}
		for c := 0; c <= 700; c++ {
			want := code && c == n || class && c/100 == int(v[0]-'0')
			if s.Has(c) != want {
				t.Fatalf("%q: Has(%d) = %t", v, c, !want)
			}
		}
	})
}

// A rule built in code gets the file's refusals from NewSet.
func TestNewSetRefusesCountOnlyWhereItCannotWork(t *testing.T) {
	st, err := ParseStatuses("201")
	if err != nil {
		t.Fatal(err)
	}
	l := ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: time.Second}
	for _, mode := range []Mode{Enforce, Shadow, Queue} {
		rl, err := NewRule("r", l, mode, nil)
		if err != nil {
			t.Fatal(err)
		}
		rl.CountOnly = st
		_, err = NewSet(ClientIP{IPv4Prefix: 32, IPv6Prefix: 64}, rl)
		if (err == nil) != (mode == Enforce) {
			t.Errorf("%s: %v", mode, err)
		}
	}
}
