package gateway

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
)

// fleetGateway is a gateway on store whose rule per-ip allows 2 an hour.
// Its store calls have a minute, not the default 50ms: a loaded machine
// can take longer, and the failure policy would then let a request pass
// without counting it.
func fleetGateway(t *testing.T, store string) *Gateway {
	t.Helper()
	return newTestGateway(t, `upstream: builtin:demo
store: {url: "`+store+`", timeout: 1m}
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
`)
}

// Two gateways on one Redis, a client far over its limit through each:
// both answer scope=fleet with the same lists, that client first, counts
// within the stated bound; each answers scope=local with its own.
func TestTopFleet(t *testing.T) {
	for name, store := range map[string]func(testing.TB, ...redistest.Option) string{
		"standalone": redistest.Server, "cluster": redistest.Cluster,
	} {
		t.Run(name, func(t *testing.T) { topFleet(t, store(t)) })
	}
}

func topFleet(t *testing.T, store string) {
	gws := []*Gateway{fleetGateway(t, store), fleetGateway(t, store)}
	refused := map[string]uint64{}
	for i, g := range gws {
		for ip, n := range map[string]int{"192.0.2.1": 40, fmt.Sprint("192.0.2.", 2+i): 4} {
			for range n {
				if clientGet(g, ip, "/x") == 429 {
					refused[ip]++
				}
			}
		}
	}
	if want := map[string]uint64{"192.0.2.1": 78, "192.0.2.2": 2, "192.0.2.3": 2}; !maps.Equal(refused, want) {
		t.Fatalf("refused: %v; want %v: 78 of the heavy client's 80 (one limit over Redis)", refused, want)
	}
	for _, g := range gws {
		if err := g.fleet.Publish(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var answers [2]dashboard.TopAnswer
	for i, g := range gws {
		adminJSON(t, g, "/v1/top?rule=per-ip&scope=fleet&n=5", &answers[i])
		a := answers[i]
		if a.Scope != "fleet" || a.Instances != 2 || len(a.Rules) != 2 {
			t.Fatalf("gateway %d: %+v; want the fleet's 2 instances", i, a)
		}
		r := a.Rules[0]
		if r.Kind != "refused" || r.Total != 78+2+2 || len(r.Entries) != 3 || r.Entries[0].Key != "192.0.2.1" {
			t.Fatalf("gateway %d, refused: %+v; want 82, 192.0.2.1 first", i, r)
		}
		for _, e := range r.Entries {
			if c := refused[e.Key]; e.Count < c || e.Count-c > r.Bound || e.Error > r.Bound || e.Count-e.Error > c {
				t.Fatalf("gateway %d: %+v, refused %d, bound %d", i, e, c, r.Bound)
			}
		}
	}
	if !reflect.DeepEqual(answers[0], answers[1]) {
		t.Fatalf("the gateways disagree:\n%+v\n%+v", answers[0], answers[1])
	}
	var local dashboard.TopAnswer
	adminJSON(t, gws[0], "/v1/top?rule=per-ip&scope=local", &local)
	if local.Scope != "local" || local.Rules[0].Total >= 78 {
		t.Fatalf("local: %+v; want this gateway's share alone", local)
	}
}

// Over the memory store a fleet query answers for the gateway alone, and
// says so.
func TestTopFleetOverMemory(t *testing.T) {
	g := adminGateway(t, "")
	clientGet(g, "192.0.2.1", "/v1/x")
	var a dashboard.TopAnswer
	adminJSON(t, g, "/v1/top?scope=fleet", &a)
	if a.Scope != "local" || a.Instances != 0 || len(a.Rules) != 4 {
		t.Fatalf("%+v; want scope local", a)
	}
}
