package ratefields_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/rls"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// start is on a boundary of every window below (1s, 10s, 1m): 1.7e9 s
// after the epoch.
var start = time.Unix(1_700_000_000, 0)

// fields are the rate limit fields one rendering gave one decision; "" is
// a field it did not send.
type fields struct {
	Limit      string // X-RateLimit-Limit; rls: RateLimit-Limit's first item
	Remaining  string // X-RateLimit-Remaining, RateLimit's r; rls: RateLimit-Remaining
	Reset      string // X-RateLimit-Reset (rls has none)
	T          string // RateLimit's t; rls: RateLimit-Reset
	RetryAfter string // Retry-After
	Quota      string // RateLimit-Policy's q; rls: RateLimit-Limit's quota
	Window     string // RateLimit-Policy's w; rls: RateLimit-Limit's w
}

// TestOneDecisionSameFields renders one decision through httplimit,
// grpclimit and rls (with --response-headers, and its answer as Envoy
// renders it) and demands the same values from each: a decision from each algorithm at its edges, and
// waits of a microsecond and of exact whole seconds.
func TestOneDecisionSameFields(t *testing.T) {
	slidingWindow := ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 10, Period: 10 * time.Second}
	slidingLog := ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 10, Period: 10 * time.Second}
	fixed := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: 10 * time.Second}
	token := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}
	leaky := ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2}
	perMinute := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Minute}
	at := func(n int, d time.Duration) []time.Duration { // n requests at d
		ts := make([]time.Duration, n)
		for i := range ts {
			ts[i] = d
		}
		return ts
	}
	for _, c := range []struct {
		name  string
		limit ratekeeper.Limit
		d     ratekeeper.Decision
		want  fields
	}{
		{"sliding window refused at a window boundary", slidingWindow, take(t, slidingWindow, at(11, 0), false),
			fields{"10", "0", "19", "10", "10", "10", "10"}},
		{"sliding window refused mid-window", slidingWindow, take(t, slidingWindow, at(11, 3*time.Second), false),
			fields{"10", "0", "16", "7", "7", "10", "10"}},
		{"sliding window allowed at a window boundary", slidingWindow, take(t, slidingWindow, at(1, 0), false),
			fields{"10", "9", "10", "10", "", "10", "10"}},
		{"sliding log refused", slidingLog, take(t, slidingLog, at(11, 2500*time.Millisecond), false),
			fields{"10", "0", "10", "10", "10", "10", "10"}},
		{"sliding log allowed", slidingLog, take(t, slidingLog, at(3, 0), false),
			fields{"10", "7", "10", "10", "", "10", "10"}},
		{"fixed window refused mid-window", fixed, take(t, fixed, at(11, 3*time.Second), false),
			fields{"10", "0", "7", "7", "7", "10", "10"}},
		{"fixed window allowed at a window boundary", fixed, take(t, fixed, at(1, 0), false),
			fields{"10", "9", "10", "10", "", "10", "10"}},
		{"token bucket allowed, burst above its rate", token, take(t, token, at(1, 0), false),
			fields{"20", "19", "1", "1", "", "20", "2"}},
		{"token bucket refused", token, take(t, token, at(21, 0), false),
			fields{"20", "0", "2", "1", "1", "20", "2"}},
		{"leaky bucket meter refused", leaky, take(t, leaky, at(3, 0), false),
			fields{"2", "0", "2", "1", "1", "2", "2"}},
		{"leaky bucket queue allowed with a delay", leaky, take(t, leaky, at(2, 0), true),
			fields{"2", "1", "2", "2", "", "2", "2"}},
		{"leaky bucket queue refused", leaky, take(t, leaky, at(4, 0), true),
			fields{"2", "0", "3", "1", "1", "2", "2"}},
		{"a wait of one microsecond", perMinute,
			ratekeeper.Decision{Limit: 10, RetryAfter: time.Microsecond, ResetAfter: time.Microsecond},
			fields{"10", "0", "1", "1", "1", "10", "60"}},
		{"a wait of exactly ten seconds", perMinute,
			ratekeeper.Decision{Limit: 10, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second},
			fields{"10", "0", "10", "10", "10", "10", "60"}},
		{"a reset of exactly ten seconds", perMinute,
			ratekeeper.Decision{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: 10 * time.Second},
			fields{"10", "4", "10", "10", "", "10", "60"}},
		{"a reset of ten seconds and a microsecond", perMinute,
			ratekeeper.Decision{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: 10*time.Second + time.Microsecond},
			fields{"10", "4", "10", "10", "", "10", "60"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Logf("decision: %+v", c.d)
			c.d.Delay = 0 // the queue's wait is not a field: httplimit would wait it
			renderings := map[string]fields{
				"httplimit": viaHTTP(t, c.limit, c.d),
				"grpclimit": viaGRPC(t, c.limit, c.d),
				"rls":       viaRLS(t, c.limit, c.d),
				"envoy":     viaEnvoy(t, c.limit, c.d),
			}
			for by, got := range renderings {
				want := c.want
				switch by {
				case "rls":
					want.Reset = "" // RateLimit-Reset is t
				case "envoy":
					want = fields{T: want.T} // X-RateLimit-Reset is t
				}
				if got != want {
					t.Errorf("%s: %+v, want %+v", by, got, want)
				}
			}
		})
	}
}

// take runs requests of cost 1 at the offsets from start on a memory
// store and returns the last one's decision.
func take(t *testing.T, l ratekeeper.Limit, offsets []time.Duration, reserve bool) ratekeeper.Decision {
	t.Helper()
	clk := storetest.NewClock(start)
	ms := memstore.New(memstore.WithClock(clk))
	defer ms.Close()
	var d ratekeeper.Decision
	for _, off := range offsets {
		clk.Set(start.Add(off))
		var err error
		d, err = ms.Take(context.Background(), ratekeeper.Request{Key: "k", Limit: l, N: 1, Reserve: reserve})
		if err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// canned is a store that answers every request with d: the renderings
// get the very same decision.
type canned struct{ d ratekeeper.Decision }

func (c canned) Take(context.Context, ratekeeper.Request) (ratekeeper.Decision, error) {
	return c.d, nil
}

func (c canned) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error { return nil }

var (
	ietfItem   = regexp.MustCompile(`^"r";r=(\d+)(?:;t=(\d+))?$`)
	policyItem = regexp.MustCompile(`^"r";q=(\d+);w=(\d+)$`)
	draft03    = regexp.MustCompile(`^(\d+), (\d+);w=(\d+)$`)
)

func viaHTTP(t *testing.T, l ratekeeper.Limit, d ratekeeper.Decision) fields {
	t.Helper()
	mw, err := httplimit.NewLimit(canned{d}, "r", l, httplimit.KeyByIP())
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	h := rec.Result().Header
	return ietf(t, "httplimit", fields{
		Limit:      h.Get("X-RateLimit-Limit"),
		Remaining:  h.Get("X-RateLimit-Remaining"),
		Reset:      h.Get("X-RateLimit-Reset"),
		RetryAfter: h.Get("Retry-After"),
	}, h.Get("RateLimit"), h.Get("RateLimit-Policy"))
}

// ietf completes f with RateLimit's t and RateLimit-Policy's q and w, and
// checks that RateLimit's r is f's Remaining.
func ietf(t *testing.T, by string, f fields, rl, policy string) fields {
	t.Helper()
	m := ietfItem.FindStringSubmatch(rl)
	if m == nil || m[1] != f.Remaining {
		t.Errorf("%s: RateLimit %q, want r=%s", by, rl, f.Remaining)
	} else {
		f.T = m[2]
	}
	if m := policyItem.FindStringSubmatch(policy); m != nil {
		f.Quota, f.Window = m[1], m[2]
	} else {
		t.Errorf("%s: RateLimit-Policy %q", by, policy)
	}
	return f
}

func viaGRPC(t *testing.T, l ratekeeper.Limit, d ratekeeper.Decision) fields {
	t.Helper()
	lim, err := ratekeeper.New(canned{d}, l)
	if err != nil {
		t.Fatal(err)
	}
	i, err := grpclimit.New("r", lim, grpclimit.ByMethod())
	if err != nil {
		t.Fatal(err)
	}
	st := new(stream)
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), st)
	_, _ = i.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"}, func(context.Context, any) (any, error) { return nil, nil })
	md := metadata.Join(st.header, st.trailer)
	get := func(k string) string {
		if v := md.Get(k); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	return ietf(t, "grpclimit", fields{
		Limit:      get("x-ratelimit-limit"),
		Remaining:  get("x-ratelimit-remaining"),
		Reset:      get("x-ratelimit-reset"),
		RetryAfter: get("retry-after"),
	}, get("ratelimit"), get("ratelimit-policy"))
}

// stream is the server side of a gRPC call, as far as the interceptor
// sees it: it keeps what is set.
type stream struct{ header, trailer metadata.MD }

func (s *stream) Method() string                  { return "/s/M" }
func (s *stream) SetHeader(md metadata.MD) error  { s.header = metadata.Join(s.header, md); return nil }
func (s *stream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *stream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

func viaRLS(t *testing.T, l ratekeeper.Limit, d ratekeeper.Decision) fields {
	t.Helper()
	resp := askRLS(t, l, d)
	h := map[string]string{}
	for _, v := range resp.ResponseHeadersToAdd {
		h[v.Key] = v.Value
	}
	f := fields{Remaining: h["RateLimit-Remaining"], T: h["RateLimit-Reset"], RetryAfter: h["Retry-After"]}
	if m := draft03.FindStringSubmatch(h["RateLimit-Limit"]); m != nil {
		f.Limit, f.Quota, f.Window = m[1], m[2], m[3]
	} else {
		t.Errorf("rls: RateLimit-Limit %q", h["RateLimit-Limit"])
	}
	return f
}

// viaEnvoy is what Envoy's enable_x_ratelimit_headers makes of serve's
// answer (XRateLimitHeaderUtils::create): X-RateLimit-Reset is
// duration_until_reset's whole seconds, the only figure that is not
// X-RateLimit-Limit's (requests_per_unit, as configured) or
// X-RateLimit-Remaining (limit_remaining, which must not exceed it).
func viaEnvoy(t *testing.T, l ratekeeper.Limit, d ratekeeper.Decision) fields {
	t.Helper()
	st := askRLS(t, l, d).Statuses[0]
	if st.LimitRemaining > st.CurrentLimit.GetRequestsPerUnit() {
		t.Errorf("envoy: X-RateLimit-Remaining %d above X-RateLimit-Limit %d", st.LimitRemaining, st.CurrentLimit.GetRequestsPerUnit())
	}
	return fields{T: strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)}
}

// askRLS is serve's answer to a descriptor of limit l, decided d.
func askRLS(t *testing.T, l ratekeeper.Limit, d ratekeeper.Decision) *rlsv3.RateLimitResponse {
	t.Helper()
	unit, mult := "second", l.Period/time.Second
	if l.Period%time.Minute == 0 {
		unit, mult = "minute", l.Period/time.Minute
	}
	cfg := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: " + unit + ", requests_per_unit: " + strconv.Itoa(l.Rate) +
		", algorithm: " + string(l.Algorithm)
	if l.Burst > 0 {
		cfg += ", burst: " + strconv.Itoa(l.Burst)
	}
	path := filepath.Join(t.TempDir(), "d.yaml")
	if err := os.WriteFile(path, []byte(cfg+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := rls.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rls.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	desc := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}
	if mult > 1 { // a period of several units: the descriptor's override says so
		if l.Burst > 0 {
			t.Fatal("an override has no burst")
		}
		desc.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(l.Rate), Unit: 1 /* SECOND */, UnitMultiplier: wrapperspb.UInt32(uint32(mult))}
		if unit == "minute" {
			desc.Limit.Unit = 2 /* MINUTE */
		}
	}
	resp, err := rls.NewService(canned{d}, rs, rls.WithResponseHeaders(true)).Decide(context.Background(),
		&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
