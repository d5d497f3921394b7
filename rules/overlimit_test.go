package rules

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

const overLimit = "    limit: {algorithm: fixed_window, rate: 10, period: 1d}\n"

func TestOverLimitParsed(t *testing.T) {
	c, err := Parse("o.yaml", []byte(`rules:
  - name: plain
    over_limit: refuse
`+overLimit+`  - name: billed
    over_limit: {action: forward, header: x-quota-exceeded}
`+overLimit+`  - name: cheap
    over_limit: {action: reroute, upstream: "http://cheap:9000"}
`+overLimit+`  - name: spill
    concurrency: {max: 2}
    over_limit: {action: reroute, upstream: "http://cheap:9000", header: X-Quota-Exceeded}
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	want := []OverLimit{
		{},
		{Action: Forward, Header: "X-Quota-Exceeded"},
		{Action: Reroute, Upstream: "http://cheap:9000"},
		{Action: Reroute, Header: "X-Quota-Exceeded", Upstream: "http://cheap:9000"},
	}
	for i, rl := range set.Rules {
		if rl.OverLimit != want[i] {
			t.Errorf("%s: %+v, want %+v", rl.Name, rl.OverLimit, want[i])
		}
	}
	if h := set.OverLimitHeaders(); !slices.Equal(h, []string{"X-Quota-Exceeded"}) {
		t.Errorf("OverLimitHeaders %q", h)
	}
	if u := set.Reroutes(); !slices.Equal(u, []string{"http://cheap:9000"}) {
		t.Errorf("Reroutes %q", u)
	}
	for i, d := range []string{"429 beyond", "beyond, forwarded with its name in X-Quota-Exceeded", "beyond, rerouted to http://cheap:9000", "beyond, rerouted to http://cheap:9000 with its name in X-Quota-Exceeded"} {
		if got := set.Rules[i].Describe(); !strings.Contains(got, d) {
			t.Errorf("%s: Describe %q lacks %q", set.Rules[i].Name, got, d)
		}
	}
}

// Each combination that cannot work is refused at its file:line and field.
func TestOverLimitRefused(t *testing.T) {
	rule := "rules:\n  - name: a\n"
	fwd := "    over_limit: {action: forward, header: X-Over}\n"
	for _, c := range []struct{ yaml, want string }{
		{rule + overLimit + "    over_limit: bounce\n", `f.yaml:4: rules[0].over_limit.action: "bounce" is not refuse, forward or reroute`},
		{rule + overLimit + "    over_limit: [forward]\n", "f.yaml:4: rules[0].over_limit: expected an over_limit"},
		{rule + overLimit + "    over_limit: {action: forward}\n", "f.yaml:4: rules[0].over_limit.header: is missing"},
		{rule + overLimit + "    over_limit: {action: forward, header: X-Over, upstream: \"http://x:1\"}\n", "f.yaml:4: rules[0].over_limit.upstream: only reroute"},
		{rule + overLimit + "    over_limit: {action: refuse, header: X-Over}\n", "f.yaml:4: rules[0].over_limit: refuse takes no header"},
		{rule + overLimit + "    over_limit: {action: forward, headers: X-Over}\n", "rules[0].over_limit.headers: unknown field"},
		{rule + overLimit + "    over_limit: {action: reroute}\n", "f.yaml:4: rules[0].over_limit.upstream: is missing"},
		{rule + overLimit + "    over_limit: {action: reroute, upstream: cheap:9000}\n", "f.yaml:4: rules[0].over_limit.upstream: has no scheme"},
		{rule + overLimit + "    over_limit: {action: reroute, upstream: \"ftp://u:secret@x\"}\n", `f.yaml:4: rules[0].over_limit.upstream: "ftp://u:xxxxx@x": use http://host:port`},
		{rule + overLimit + "    over_limit: {action: reroute, upstream: \"http://\"}\n", "f.yaml:4: rules[0].over_limit.upstream: \"http:\" has no host"},
		{rule + overLimit + "    over_limit: {action: forward, header: X-Forwarded-For}\n", "f.yaml:4: rules[0].over_limit.header: X-Forwarded-For is written by any client"},
		{rule + overLimit + "    over_limit: {action: forward, header: Connection}\n", "f.yaml:4: rules[0].over_limit.header: Connection is a hop-by-hop"},
		{rule + overLimit + "    over_limit: {action: forward, header: X-RateLimit-Remaining}\n", "f.yaml:4: rules[0].over_limit.header: X-Ratelimit-Remaining has a meaning of its own"},
		{rule + overLimit + "    over_limit: {action: forward, header: \"X Over\"}\n", `f.yaml:4: rules[0].over_limit.header: "X Over" is not a header name`},
		// The gateway replaces the trace context when tracing is on: the
		// upstream would never learn that the request is over.
		{rule + overLimit + "    over_limit: {action: forward, header: traceparent}\n", "f.yaml:4: rules[0].over_limit.header: Traceparent has a meaning of its own"},
		{rule + overLimit + "    over_limit: {action: reroute, upstream: \"http://c:1\", header: Baggage}\n", "f.yaml:4: rules[0].over_limit.header: Baggage has a meaning of its own"},
		{rule + overLimit + "    over_limit: {action: forward, header: X-HTTP-Method-Override}\n", "f.yaml:4: rules[0].over_limit.header: X-Http-Method-Override has a meaning of its own"},
		{rule + "    mode: shadow\n" + overLimit + fwd, "f.yaml:5: rules[0].over_limit: forward applies to an enforced rule, not mode shadow"},
		{rule + "    mode: queue\n    limit: {algorithm: leaky_bucket, rate: 10, period: 1s}\n" + fwd, "f.yaml:5: rules[0].over_limit: forward applies to an enforced rule, not mode queue"},
		{rule + "    ban: 1h\n" + overLimit + fwd, "f.yaml:5: rules[0].over_limit: forward never refuses, so nothing starts a ban"},
		{rule + overLimit + "    count_only: {status: [201]}\n" + fwd, "f.yaml:5: rules[0].over_limit: forward cannot count outcomes"},
		{rule + overLimit + "    cost: {response_header: X-Cost, max: 10}\n" + fwd, "f.yaml:5: rules[0].over_limit: forward cannot charge the response's cost"},
		{rule + overLimit + "    refused: {status: 503}\n" + fwd, "f.yaml:4: rules[0].refused: a rule that forwards or reroutes never refuses"},
		// No rule may read a header over_limit writes.
		{rule + overLimit + fwd + "  - name: b\n    key: [header:x-over]\n" + overLimit, "f.yaml:6: rules[1].key[0]: X-Over is written by the gateway for the upstream"},
		{rule + overLimit + fwd + "  - name: b\n    match: {headers: {X-Over: \"*\"}}\n" + overLimit, "f.yaml:6: rules[1].match.headers.X-Over: X-Over is written by the gateway"},
		{rule + overLimit + fwd + "  - name: b\n    match: {absent_headers: [X-Over]}\n" + overLimit, "f.yaml:6: rules[1].match.absent_headers.X-Over: X-Over is written"},
		{rule + overLimit + fwd + "  - name: b\n    cost: {header: X-Over, max: 3}\n" + overLimit, "f.yaml:6: rules[1].cost.header: X-Over is written"},
		{rule + fwd + "    limit: {algorithm: fixed_window, rate: 10, calendar: monthly}\n    offset_header: X-Over\n", "f.yaml:5: rules[0].offset_header: X-Over is written"},
		{rule + fwd + overLimit + "    tiers: {header: X-Over, limits: {pro: {algorithm: fixed_window, rate: 1, period: 1s}}}\n", "f.yaml:5: rules[0].tiers.header: X-Over is written"},
	} {
		_, err := Parse("f.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: %T is not an *Error", c.yaml, err)
		}
	}
}

// FuzzOverLimit: any over_limit decodes to a rule or to errors that each
// name a line and a field, never a panic; a valid one compiles to what it
// says.
func FuzzOverLimit(f *testing.F) {
	for _, s := range []string{"refuse", "forward", "{action: forward, header: X-Over}", "{action: reroute, upstream: \"http://c:1\"}", "[a, b]", "{action: {x: 1}}", "&a {action: *a}", "{header: \"\\x00\"}", "!!binary aGk="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c, err := Parse("f.yaml", []byte("rules:\n  - name: a\n"+overLimit+"    over_limit: "+v+"\n"))
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.yaml:") {
					t.Fatalf("%q: a message without its place: %q", v, line)
				}
			}
			return
		}
		set, err := Compile(c)
		if err != nil {
			t.Fatalf("%q: parsed but does not compile: %v", v, err)
		}
		o := set.Rules[0].OverLimit
		switch o.Action {
		case Forward:
			if o.Header == "" || o.Upstream != "" {
				t.Fatalf("%q: forward %+v", v, o)
			}
		case Reroute:
			if CheckUpstream(o.Upstream) != nil {
				t.Fatalf("%q: reroute to %q", v, o.Upstream)
			}
		default:
			if o != (OverLimit{}) {
				t.Fatalf("%q: refuse %+v", v, o)
			}
		}
	})
}

// NewSet takes a rule's OverLimit set in code, and refuses one that a
// file could not write.
func TestNewSetOverLimit(t *testing.T) {
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Minute}
	for _, c := range []struct {
		o    OverLimit
		mode Mode
		want string // "" for none
	}{
		{OverLimit{Action: Forward, Header: "X-Over"}, Enforce, ""},
		{OverLimit{Action: Reroute, Upstream: "http://c:1"}, Enforce, ""},
		{OverLimit{Action: Forward}, Enforce, "forward needs a Header"},
		{OverLimit{Action: Forward, Header: "x-over"}, Enforce, "not in canonical form"},
		{OverLimit{Action: Forward, Header: "X-Forwarded-For"}, Enforce, "X-Forwarded-For is written by any client"},
		{OverLimit{Action: Reroute, Upstream: "c:1"}, Enforce, "has no scheme"},
		{OverLimit{Action: Forward, Header: "X-Over"}, Shadow, "needs an enforced rule"},
		{OverLimit{Header: "X-Over"}, Enforce, "refuse takes no header"},
		{OverLimit{Action: 7}, Enforce, "is not Refuse, Forward or Reroute"},
	} {
		rl, err := NewRule("r", l, c.mode, nil)
		if err != nil {
			t.Fatal(err)
		}
		rl.OverLimit = c.o
		set, err := NewSet(ClientIP{}, rl)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.o, err)
		case c.want == "" && (c.o.Header != "" && !slices.Equal(set.OverLimitHeaders(), []string{c.o.Header}) || c.o.Upstream != "" && !slices.Equal(set.Reroutes(), []string{c.o.Upstream})):
			t.Errorf("%+v: headers %q, reroutes %q", c.o, set.OverLimitHeaders(), set.Reroutes())
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}
