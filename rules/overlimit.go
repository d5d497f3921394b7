package rules

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper/internal/yamlconf"
)

// OverLimitConfig is a rule's over_limit as written: an action alone
// (over_limit: refuse), or a mapping with the action's header and
// upstream (over_limit: {action: forward, header: X-Quota-Exceeded}).
type OverLimitConfig struct {
	// Action is "refuse" (default), "forward" or "reroute".
	Action string `yaml:"action"`
	// Header names the request header that tells the upstream which
	// rules the request exceeded; required with forward.
	Header string `yaml:"header"`
	// Upstream is the URL a reroute sends the request to.
	Upstream string `yaml:"upstream"`
}

// overLimitFields is OverLimitConfig without its decoder.
type overLimitFields OverLimitConfig

// UnmarshalYAML reads an over_limit as an action or as a mapping.
func (c *OverLimitConfig) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*c = OverLimitConfig{Action: n.Value}
		return nil
	case yaml.MappingNode:
		if err := yamlconf.KnownKeys(n, reflect.TypeFor[overLimitFields]()); err != nil {
			return err
		}
		return n.Decode((*overLimitFields)(c))
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: expected an over_limit (refuse, forward or reroute, or a mapping like {action: forward, header: X-Quota-Exceeded}), not a %s", n.Line, kindName(n.Kind))}}
}

// OverAction is what a rule does with a request once its limit is spent.
type OverAction int

const (
	// Refuse answers it as the rule's mode says (429 when enforced).
	Refuse OverAction = iota
	// Forward passes it on, naming the rule in OverLimit.Header.
	Forward
	// Reroute sends it to OverLimit.Upstream, naming the rule in
	// OverLimit.Header when there is one.
	Reroute
)

// String is the action as configs write it.
func (a OverAction) String() string {
	switch a {
	case Forward:
		return "forward"
	case Reroute:
		return "reroute"
	}
	return "refuse"
}

// OverLimit is a rule's over_limit compiled. A rule that forwards or
// reroutes never refuses: within its limit it takes as any rule, and
// past it the request goes on taking nothing from it.
type OverLimit struct {
	// Action is refuse, forward or reroute.
	Action OverAction
	// Header is the canonical name of the header that lists the rules
	// exceeded; "" for none (refuse, or a reroute without one).
	Header string
	// Upstream is a reroute's URL, as written; "" otherwise.
	Upstream string
}

// buildOverLimit compiles rule rc's over_limit (at field at) into rl, and
// refuses what cannot work. A rule that forwards or reroutes must decide
// on its own after the request is admitted. So it cannot be shadow or
// queue, ban, count outcomes, or charge the response's cost.
func buildOverLimit(at string, rc RuleConfig, rl *Rule, fail func(string, string, ...any)) {
	oc := rc.OverLimit
	at += ".over_limit"
	switch oc.Action {
	case "", "refuse":
		if oc.Header != "" || oc.Upstream != "" {
			fail(at, "refuse takes no header or upstream: set action: forward or reroute, or remove them")
		}
		return
	case "forward":
		rl.OverLimit.Action = Forward
		if oc.Header == "" {
			fail(at+".header", "is missing: forward names the exceeded rules in a header, like X-Quota-Exceeded")
		}
		if oc.Upstream != "" {
			fail(at+".upstream", "only reroute has an upstream: set action: reroute, or remove upstream")
		}
	case "reroute":
		rl.OverLimit.Action = Reroute
		if err := CheckUpstream(oc.Upstream); err != nil {
			fail(at+".upstream", "%v", err)
		}
		rl.OverLimit.Upstream = oc.Upstream
	default:
		fail(at+".action", "%q is not refuse, forward or reroute", oc.Action)
		return
	}
	if oc.Header != "" {
		name, err := overHeaderName(oc.Header)
		if err != nil {
			fail(at+".header", "%v", err)
		}
		rl.OverLimit.Header = name
	}
	checkOverCombination(at, rc, rl, fail)
}

// checkOverCombination refuses with a forward or reroute the fields that
// refuse a request or count it apart from its admission.
func checkOverCombination(at string, rc RuleConfig, rl *Rule, fail func(string, string, ...any)) {
	what := rl.OverLimit.Action.String()
	if rl.Mode != Enforce {
		fail(at, "%s applies to an enforced rule, not mode %s: a %s rule never refuses", what, rl.Mode, rl.Mode)
	}
	if rc.Ban > 0 {
		fail(at, "%s never refuses, so nothing starts a ban: remove ban", what)
	}
	if rc.CountOnly != nil {
		fail(at, "%s cannot count outcomes: a count_only rule is decided by a look that takes nothing; remove count_only", what)
	}
	if rc.Cost.ResponseHeader != "" || len(rc.Cost.ResponseJSON) > 0 {
		fail(at, "%s cannot charge the response's cost yet: give a fixed cost or a request header's", what)
	}
	if r := rc.Refused; r.Status != 0 || r.Type != "" || r.Title != "" || r.Detail != "" || r.RetryAfterJitter != 0 {
		fail(strings.TrimSuffix(at, ".over_limit")+".refused", "a rule that forwards or reroutes never refuses: only hide_headers applies to it")
	}
}

// checkOverLimit reports an OverLimit that NewSet's rule rl cannot
// apply, as buildOverLimit refuses it in a file.
func (rl *Rule) checkOverLimit() error {
	o := rl.OverLimit
	var err error
	switch {
	case o.Action == Refuse:
		if o.Header != "" || o.Upstream != "" {
			err = errors.New("refuse takes no header or upstream")
		}
		return wrapRule(rl.Name, err)
	case o.Action != Forward && o.Action != Reroute:
		err = fmt.Errorf("OverLimit.Action %d is not Refuse, Forward or Reroute", o.Action)
	case rl.Mode != Enforce || rl.Ban > 0 || !rl.CountOnly.IsZero() || rl.Cost.AfterResponse():
		err = fmt.Errorf("%s needs an enforced rule without a ban, CountOnly or a cost from the response", o.Action)
	case o.Action == Forward && (o.Header == "" || o.Upstream != ""):
		err = errors.New("forward needs a Header and no Upstream")
	case o.Action == Reroute:
		err = CheckUpstream(o.Upstream)
	}
	if err == nil && o.Header != "" {
		var name string
		if name, err = overHeaderName(o.Header); err == nil && name != o.Header {
			err = fmt.Errorf("header %q is not in canonical form (%s)", o.Header, name)
		}
	}
	return wrapRule(rl.Name, err)
}

// wrapRule names rule name in err, if any.
func wrapRule(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rule %q: over_limit: %w", name, err)
}

// overHeaderName is the canonical form of an over_limit header, or an
// error when the gateway cannot write it as the upstream's alone.
func overHeaderName(name string) (string, error) {
	if !validHeaderName(name) {
		return name, fmt.Errorf("%q is not a header name", name)
	}
	name = http.CanonicalHeaderKey(name)
	if name == "Host" || strings.HasPrefix(name, "X-Ratelimit-") || name == "Ratelimit" || name == "Ratelimit-Policy" || name == "Retry-After" {
		return name, fmt.Errorf("%s has a meaning of its own: name a header of yours, like X-Quota-Exceeded", name)
	}
	switch name {
	case "Traceparent", "Tracestate", "Baggage", "X-Http-Method-Override", "X-Http-Method", "X-Method-Override":
		// With tracing on, the gateway replaces the trace context for the
		// upstream; an upstream reads the others as a method.
		return name, fmt.Errorf("%s has a meaning of its own, which the gateway or the upstream gives it: name a header of yours, like X-Quota-Exceeded", name)
	}
	return name, checkRuleHeader(name)
}

// CheckUpstream reports what keeps s from being an upstream's URL:
// http:// or https:// with a host. The error does not quote a password.
func CheckUpstream(s string) error {
	if s == "" {
		return errors.New("is missing: the URL of the API to send to, like http://cheap:9000")
	}
	u, err := url.Parse(s)
	switch {
	case !strings.Contains(s, "://"):
		return errors.New("has no scheme: add http:// or https://")
	case err != nil:
		// url.Error quotes the whole URL, a password in it too.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: use http://host:port or https://host:port", u.Redacted())
	case u.Host == "":
		return fmt.Errorf("%q has no host", u.Redacted())
	}
	return nil
}

// checkOverHeaders refuses a rule that reads a header over_limit writes:
// the client's is dropped, so no rule could see it as the upstream does.
func checkOverHeaders(c *Config, over []string, fail func(string, string, ...any)) {
	if len(over) == 0 {
		return
	}
	bad := func(field, name string) {
		if n := http.CanonicalHeaderKey(strings.TrimSpace(name)); slices.Contains(over, n) {
			fail(field, "%s is written by the gateway for the upstream (over_limit): the client's is dropped, so a rule cannot read it", n)
		}
	}
	for i, rc := range c.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		for k, p := range rc.Key {
			if kind, arg, _ := strings.Cut(p, ":"); strings.EqualFold(strings.TrimSpace(kind), "header") {
				bad(fmt.Sprintf("%s.key[%d]", at, k), arg)
			}
		}
		for n := range rc.Match.Headers {
			bad(at+".match.headers."+n, n)
		}
		for _, n := range rc.Match.AbsentHeaders {
			bad(at+".match.absent_headers."+n, n)
		}
		bad(at+".tiers.header", rc.Tiers.Header)
		bad(at+".offset_header", rc.OffsetHeader)
		bad(at+".cost.header", rc.Cost.Header)
	}
}

// OverLimitHeaders are the headers the rules' over_limit write, canonical,
// each once. A server drops a client's own before the rules decide. The
// slice is the set's.
func (s *Set) OverLimitHeaders() []string { return s.over }

// Reroutes are the upstreams the rules' over_limit reroute to, each once,
// in the rules' order. The slice is the set's.
func (s *Set) Reroutes() []string { return s.reroutes }

// describeOverLimit writes what the rule does past its limit, when it is
// not refuse.
func (rl *Rule) describeOverLimit(b *strings.Builder) {
	o := rl.OverLimit
	switch o.Action {
	case Forward:
		fmt.Fprintf(b, "; beyond, forwarded with its name in %s", o.Header)
	case Reroute:
		fmt.Fprintf(b, "; beyond, rerouted to %s", redacted(o.Upstream))
		if o.Header != "" {
			fmt.Fprintf(b, " with its name in %s", o.Header)
		}
	}
}

// redacted is the URL s with a password hidden.
func redacted(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}
