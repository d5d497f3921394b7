package rls

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// topConfig has a limit of 2 per hour on each API key, whose values are
// secrets, and one on each team, whose values the admin may see.
const topConfig = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: team
    show_key: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
`

// runServer runs a Server of yaml on free loopback ports until the test
// ends, and returns it listening and a gRPC client of it.
func runServer(t *testing.T, yaml string, o ServerOptions) (*Server, rlsv3.RateLimitServiceClient) {
	t.Helper()
	return runServerCtx(t, context.Background(), yaml, o)
}

// runServerCtx is runServer until ctx is done or the test ends.
func runServerCtx(t *testing.T, ctx context.Context, yaml string, o ServerOptions) (*Server, rlsv3.RateLimitServiceClient) {
	t.Helper()
	config := filepath.Join(t.TempDir(), "rls.yaml")
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	o.GRPCListen, o.HTTPListen, o.AdminListen, o.Watch = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", -1
	s, err := NewServer(context.Background(), config, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); s.AdminAddr() == nil || s.HTTPAddr() == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the server did not listen within 30s")
		}
		time.Sleep(time.Millisecond) // polls for the listeners, with a deadline
	}
	conn, err := grpc.NewClient(s.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rlsv3.NewRateLimitServiceClient(conn)
}

// getAdmin GETs path on s's admin listener with token (none when empty).
func getAdmin(t *testing.T, s *Server, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+s.AdminAddr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// GET /v1/top on serve's admin listener lists, per descriptor path, the
// keys refused and those admitted near their limit, each value a
// fingerprint unless show_key. With an admin token it asks for it; the
// status and page stay open unless reads are protected.
func TestServerTop(t *testing.T) {
	const token = "top-token-0123456789abcdef"
	s, client := runServer(t, topConfig, ServerOptions{AdminToken: token})
	ask := func(d *ratelimitv3.RateLimitDescriptor) rlsv3.RateLimitResponse_Code {
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for i := range 5 { // 2 allowed, the second near the limit; 3 refused
		want := rlsv3.RateLimitResponse_OK
		if i >= 2 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := ask(desc("api_key", "sk_live_secret")); got != want {
			t.Fatalf("request %d: %v, want %v", i+1, got, want)
		}
	}
	for range 3 {
		ask(desc("team", "blue", "user", "ann"))
	}
	if code, body := getAdmin(t, s, "/v1/top", ""); code != http.StatusUnauthorized {
		t.Fatalf("/v1/top without the token: %d %s", code, body)
	}
	code, body := getAdmin(t, s, "/v1/top?span=1h", token)
	if code != http.StatusOK || strings.Contains(body, "sk_live_secret") {
		t.Fatalf("/v1/top: %d %s", code, body)
	}
	var ans dashboard.TopAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // rule kind -> its entries
	for _, r := range ans.Rules {
		var es []string
		for _, e := range r.Entries {
			es = append(es, e.Key+" "+itoa(e.Count))
		}
		got[r.Rule+" "+r.Kind] = strings.Join(es, ", ")
	}
	want := map[string]string{
		"api.api_key refused":   "api_key=" + rules.Fingerprint("sk_live_secret") + " 3",
		"api.api_key near":      "api_key=" + rules.Fingerprint("sk_live_secret") + " 1",
		"api.team.user refused": "team=blue|user=ann 1",
		"api.team.user near":    "team=blue|user=ann 1",
	}
	if ans.Scope != "local" || ans.Span != "1h" || len(got) != len(want) {
		t.Fatalf("answer %s", body)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if code, body := getAdmin(t, s, "/v1/top?rule=nope", token); code != http.StatusNotFound {
		t.Fatalf("unknown rule: %d %s", code, body)
	}
	code, body = getAdmin(t, s, "/v1/status", "")
	var st dashboard.Status
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil || len(st.Rules) != 2 {
		t.Fatalf("/v1/status: %d %s", code, body)
	}
	if r := st.Rules[0]; r.Name != "api.api_key" || r.Allowed != 2 || r.Refused != 3 || r.Limit != "2 per hour" {
		t.Fatalf("status of api_key: %+v", r)
	}
	if st.Store.Mode != "memory" || !st.Store.Healthy || !st.Reload.OK {
		t.Fatalf("status: %s", body)
	}
	if code, _ := getAdmin(t, s, "/ui/", ""); code != http.StatusOK {
		t.Fatalf("/ui/: %d", code)
	}
}

// With --admin-protect-reads, the status asks for the token too.
func TestServerTopProtectReads(t *testing.T) {
	const token = "top-token-0123456789abcdef"
	s, _ := runServer(t, topConfig, ServerOptions{AdminToken: token, ProtectReads: true})
	if code, _ := getAdmin(t, s, "/v1/status", ""); code != http.StatusUnauthorized {
		t.Fatalf("/v1/status without the token: %d", code)
	}
	if code, _ := getAdmin(t, s, "/v1/status", token); code != http.StatusOK {
		t.Fatalf("/v1/status with the token: %d", code)
	}
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Two serve processes on one Redis answer the same fleet lists: the heavy
// key first, with every count from both; each local list has its own share.
func TestServerTopFleet(t *testing.T) {
	const token = "top-token-0123456789abcdef"
	o := ServerOptions{AdminToken: token, Store: storeconfig.Config{URL: redistest.Server(t), Timeout: time.Minute}.WithDefaults()}
	a, ca := runServer(t, topConfig, o)
	b, cb := runServer(t, topConfig, o)
	if a.fleet == nil || b.fleet == nil {
		t.Fatal("no fleet over Redis")
	}
	ask := func(c rlsv3.RateLimitServiceClient, key string) {
		t.Helper()
		d := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", key)}}
		if _, err := c.ShouldRateLimit(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	for range 6 { // the first on each allowed, then 10 refused: 5 on each
		ask(ca, "heavy")
		ask(cb, "heavy")
	}
	for range 3 {
		ask(cb, "light") // 2 allowed, 1 refused
	}
	for _, s := range []*Server{a, b} {
		if err := s.fleet.Publish(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(s *Server, scope string) (string, dashboard.TopAnswer) {
		t.Helper()
		code, body := getAdmin(t, s, "/v1/top?rule=api.api_key&scope="+scope, token)
		var ans dashboard.TopAnswer
		if err := json.Unmarshal([]byte(body), &ans); code != http.StatusOK || err != nil {
			t.Fatalf("%s: %d %s", scope, code, body)
		}
		var es []string
		for _, r := range ans.Rules {
			if r.Kind == "refused" {
				for _, e := range r.Entries {
					es = append(es, e.Key+" "+itoa(e.Count))
				}
			}
		}
		return strings.Join(es, ", "), ans
	}
	heavy, light := "api_key="+rules.Fingerprint("heavy"), "api_key="+rules.Fingerprint("light")
	want := heavy + " 10, " + light + " 1"
	for name, s := range map[string]*Server{"a": a, "b": b} {
		got, ans := refused(s, "fleet")
		if got != want || ans.Scope != "fleet" || ans.Instances != 2 {
			t.Errorf("%s's fleet lists: %q over %d instances (scope %s), want %q over 2", name, got, ans.Instances, ans.Scope, want)
		}
	}
	if got, _ := refused(a, "local"); got != heavy+" 5" {
		t.Errorf("a's local list: %q, want its own share", got)
	}
}
