package main

// Interoperability tests: they run `ratekeeper serve` as a separate process
// (the binary built by binary(), in proxy_e2e_test.go) and talk to it over
// loopback with the gRPC client generated from go-control-plane's protos,
// as Envoy would, and over its HTTP JSON API.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// rlsProc is a running `ratekeeper serve`.
type rlsProc struct {
	*process
	grpc, http, admn string
	client           rlsv3.RateLimitServiceClient
	conn             *grpc.ClientConn
}

// startServe runs `ratekeeper serve --config config` on free loopback ports.
func startServe(t *testing.T, config string, args ...string) *rlsProc {
	t.Helper()
	args = append([]string{"serve", "--config", config, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--watch", "50ms", "--log-format", "json", "--log-level", "debug"}, args...)
	proc, m := startProcess(t, "rate limit service listening", args...)
	p := &rlsProc{process: proc, grpc: fmt.Sprint(m["grpc"]), http: fmt.Sprint(m["http"]), admn: fmt.Sprint(m["admin"])}
	var err error
	p.conn, err = grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.conn.Close() })
	p.client = rlsv3.NewRateLimitServiceClient(p.conn)
	return p
}

func ctx10s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ask calls ShouldRateLimit.
func (p *rlsProc) ask(domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	p.t.Helper()
	resp, err := p.client.ShouldRateLimit(ctx10s(p.t), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		p.t.Fatal(err)
	}
	return resp
}

func (p *rlsProc) metrics() string {
	p.t.Helper()
	resp, err := http.Get("http://" + p.admn + "/metrics")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func rd(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func summary(r *rlsv3.RateLimitResponse) string {
	s := []string{r.OverallCode.String()}
	for _, st := range r.Statuses {
		s = append(s, st.Code.String())
	}
	return strings.Join(s, " ")
}

// e2eConfig uses years and weeks so that no window ends during a test (a
// year window is [k·365d, (k+1)·365d) from the epoch).
const e2eConfig = `domain: e2e
descriptors:
  - key: fixed
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
  - key: path
    value: /api/*
    rate_limit: {unit: year, requests_per_unit: 3}
  - key: team
    value: a
    descriptors:
      - key: user
        rate_limit: {name: per_user, unit: year, requests_per_unit: 4}
  - key: vip
    descriptors:
      - key: user
        rate_limit:
          unit: year
          requests_per_unit: 6
          replaces: [{name: per_user}]
  - key: bucket
    rate_limit: {unit: day, requests_per_unit: 1, algorithm: token_bucket, burst: 7}
  - key: leaky
    rate_limit: {unit: day, requests_per_unit: 1, algorithm: leaky_bucket, burst: 4}
  - key: log
    rate_limit: {unit: week, requests_per_unit: 3, algorithm: sliding_log}
  - key: slide
    rate_limit: {unit: week, requests_per_unit: 8, algorithm: sliding_window}
`

func writeConfig(t *testing.T, dir, name, s string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// passes counts the requests answered OK before the first OVER_LIMIT (at
// most 100).
func (p *rlsProc) passes(domain string, d *ratelimitv3.RateLimitDescriptor) int {
	p.t.Helper()
	for i := range 100 {
		if r := p.ask(domain, 0, d); r.OverallCode != rlsv3.RateLimitResponse_OK {
			return i
		}
	}
	return 100
}

func TestServeInterop(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startServe(t, dir, "--response-headers")

	t.Run("exact count and fields", func(t *testing.T) {
		for i := range 5 {
			r := p.ask("e2e", 0, rd("fixed", "k1"))
			st := r.Statuses[0]
			if r.OverallCode != rlsv3.RateLimitResponse_OK || st.LimitRemaining != uint32(4-i) ||
				st.CurrentLimit.GetRequestsPerUnit() != 5 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_YEAR ||
				st.DurationUntilReset.AsDuration() <= 0 || st.DurationUntilReset.AsDuration() > 365*24*time.Hour {
				t.Fatalf("request %d: %v", i+1, r)
			}
		}
		r := p.ask("e2e", 0, rd("fixed", "k1"))
		if summary(r) != "OVER_LIMIT OVER_LIMIT" || r.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("6th: %v", r)
		}
		hdr := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			hdr[h.Key] = h.Value
		}
		if hdr["RateLimit-Limit"] != "5, 5;w=31536000" || hdr["RateLimit-Remaining"] != "0" || hdr["RateLimit-Reset"] == "" || hdr["Retry-After"] == "" {
			t.Fatalf("headers: %v", hdr)
		}
	})
	t.Run("hits_addend", func(t *testing.T) {
		if r := p.ask("e2e", 3, rd("fixed", "k2")); r.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("request-level 3: %v", r)
		}
		d := rd("fixed", "k2")
		d.HitsAddend = wrapperspb.UInt64(2)
		if r := p.ask("e2e", 3, d); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("descriptor-level 2: %v", r)
		}
		if r := p.ask("e2e", 0, rd("fixed", "k2")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("past the limit: %v", r)
		}
	})
	t.Run("cost above the limit", func(t *testing.T) {
		// Over the gRPC wire: OVER_LIMIT with what is left, no
		// duration_until_reset, no Retry-After, and raw_body saying why.
		p.ask("e2e", 2, rd("fixed", "k3"))
		r := p.ask("e2e", 6, rd("fixed", "k3"))
		st := r.Statuses[0]
		if summary(r) != "OVER_LIMIT OVER_LIMIT" || st.LimitRemaining != 3 || st.DurationUntilReset != nil || !strings.Contains(string(r.RawBody), "can never pass") {
			t.Fatalf("cost 6 of 5: %v", r)
		}
		for _, h := range r.ResponseHeadersToAdd {
			if h.Key == "Retry-After" || h.Key == "RateLimit-Reset" {
				t.Fatalf("cost 6 of 5: %s: %s", h.Key, h.Value)
			}
		}
	})
	t.Run("shadow", func(t *testing.T) {
		for i := range 4 {
			if r := p.ask("e2e", 0, rd("shadow", "s")); summary(r) != "OK OK" {
				t.Fatalf("shadow request %d: %v", i+1, r)
			}
		}
		if !strings.Contains(p.metrics(), `ratekeeper_rls_over_limit_total{descriptor="e2e.shadow"} 2`) {
			t.Fatal("shadow over-limit not counted")
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		for range 20 {
			r := p.ask("e2e", 0, rd("free", "x"))
			if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
				t.Fatalf("unlimited: %v", r)
			}
		}
	})
	t.Run("wildcards", func(t *testing.T) {
		if n := p.passes("e2e", rd("path", "/api/users")); n != 3 {
			t.Fatalf("/api/users: %d passed, want 3", n)
		}
		if n := p.passes("e2e", rd("path", "/api/posts")); n != 3 {
			t.Fatalf("/api/posts (its own count): %d passed, want 3", n)
		}
		if r := p.ask("e2e", 0, rd("path", "/static/x")); r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("/static/x matched: %v", r)
		}
	})
	t.Run("replaces", func(t *testing.T) {
		both := func() *rlsv3.RateLimitResponse {
			return p.ask("e2e", 0, rd("team", "a", "user", "u1"), rd("vip", "yes", "user", "u1"))
		}
		for i := range 6 {
			if r := both(); summary(r) != "OK OK OK" || r.Statuses[0].CurrentLimit != nil {
				t.Fatalf("request %d: %v", i+1, r)
			}
		}
		if r := both(); summary(r) != "OVER_LIMIT OK OVER_LIMIT" {
			t.Fatalf("7th: %v", r)
		}
		if n := p.passes("e2e", rd("team", "a", "user", "u1")); n != 4 {
			t.Fatalf("the replaced limit was used: %d passed alone, want 4", n)
		}
	})
	t.Run("every algorithm", func(t *testing.T) {
		for key, want := range map[string]int{"bucket": 7, "leaky": 4, "log": 3, "slide": 8} {
			if n := p.passes("e2e", rd(key, "x")); n != want {
				t.Errorf("%s: %d passed, want %d", key, n, want)
			}
		}
	})
	t.Run("errors", func(t *testing.T) {
		_, err := p.client.ShouldRateLimit(ctx10s(t), &rlsv3.RateLimitRequest{Domain: "e2e"})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("no descriptors: %v", err)
		}
	})
	t.Run("health and reflection", func(t *testing.T) {
		h, err := healthpb.NewHealthClient(p.conn).Check(ctx10s(t), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health: %v %v", h, err)
		}
		stream, err := reflectionpb.NewServerReflectionClient(p.conn).ServerReflectionInfo(ctx10s(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.Name)
		}
		if !slices.Contains(names, "envoy.service.ratelimit.v3.RateLimitService") || !slices.Contains(names, "grpc.health.v1.Health") {
			t.Fatalf("reflection lists %v", names)
		}
	})
	t.Run("http", func(t *testing.T) {
		post := func(path, body string) (int, string) {
			resp, err := http.Post("http://"+p.http+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		code, body := post("/v1/check", `{"domain":"e2e","descriptors":[{"entries":[{"key":"fixed","value":"h"}],"hits_addend":4}]}`)
		if code != 200 || !strings.Contains(body, `"limit_remaining":1`) {
			t.Fatalf("/v1/check: %d %s", code, body)
		}
		code, body = post("/json", `{"domain":"e2e","descriptors":[{"entries":[{"key":"fixed","value":"h"}]}]}`)
		if code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
			t.Fatalf("/json: %d %s", code, body)
		}
		// gRPC and HTTP share the counts.
		if r := p.ask("e2e", 0, rd("fixed", "h")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("gRPC after HTTP: %v", r)
		}
		code, body = post("/json", `{"domain":"e2e","descriptors":[{"entries":[{"key":"fixed","value":"h"}]}]}`)
		if code != 429 || !strings.Contains(body, `"OVER_LIMIT"`) {
			t.Fatalf("/json over the limit: %d %s", code, body)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		m := p.metrics()
		for _, want := range []string{
			`ratekeeper_decisions_total{result="allowed",rule="e2e.fixed"}`,
			`ratekeeper_decisions_total{result="limited",rule="e2e.fixed"}`,
			`ratekeeper_store_duration_seconds_count{op="take"}`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func TestServeReload(t *testing.T) {
	dir := t.TempDir()
	file := writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startServe(t, file)
	if n := p.passes("e2e", rd("fixed", "r")); n != 5 {
		t.Fatalf("%d passed, want 5", n)
	}
	// A larger limit: the next window's count goes on from the same counter.
	writeConfig(t, dir, "e2e.yaml", strings.Replace(e2eConfig, "requests_per_unit: 5}", "requests_per_unit: 8}", 1))
	waitFor(t, "the reload", func() bool {
		return p.ask("e2e", 0, rd("fixed", "other")).Statuses[0].CurrentLimit.GetRequestsPerUnit() == 8
	})
	if n := p.passes("e2e", rd("fixed", "r")); n != 3 {
		t.Fatalf("after the reload: %d passed, want 3 (8 - 5)", n)
	}
	// An invalid file keeps the old configuration serving.
	writeConfig(t, dir, "e2e.yaml", e2eConfig+"  - key: broken\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	// os.WriteFile truncates first: a reload may read the file empty, and
	// fail on that, before one reads it whole and names the broken field.
	waitFor(t, "the failed reload naming file, line and field", func() bool {
		logs := p.Logs()
		return strings.Contains(logs, "e2e.yaml:") && strings.Contains(logs, "rate_limit.unit")
	})
	if !strings.Contains(p.metrics(), `ratekeeper_config_reloads_total{result="failure"}`) {
		t.Fatalf("the failed reload is not counted")
	}
	if r := p.ask("e2e", 0, rd("fixed", "new")); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 8 {
		t.Fatalf("after an invalid reload: %v", r)
	}
	// SIGHUP reloads too (here: the same valid file again).
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload", func() bool {
		return p.ask("e2e", 0, rd("fixed", "other2")).Statuses[0].CurrentLimit.GetRequestsPerUnit() == 5
	})
}

func TestServeReferenceExamples(t *testing.T) {
	p := startServe(t, "../../rls/testdata/reference", "--http-listen", "-")
	if r := p.ask("edge_proxy_per_ip", 0, rd("remote_address", "50.0.0.5")); summary(r) != "OVER_LIMIT OVER_LIMIT" || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
		t.Fatalf("blocked address: %v", r)
	}
	if r := p.ask("internal", 0, rd("ldap", "x"), rd("azure", "y")); summary(r) != "OK OK OK" || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 100 {
		t.Fatalf("internal: %v", r)
	}
	if r := p.ask("example4", 0, rd("key", "value")); r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("example4 at the wrong depth: %v", r)
	}
	if r := p.ask("messaging", 0, rd("message_type", "marketing", "to_number", "1")); r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
		t.Fatalf("messaging: %v", r)
	}
}

func TestServeBadConfig(t *testing.T) {
	dir := t.TempDir()
	bad := writeConfig(t, dir, "bad.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      algorithm: magic\n")
	out, err := exec.Command(binary(t), "serve", "--config", bad, "--grpc-listen", "127.0.0.1:0", "--http-listen", "-", "--admin-listen", "-").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bad.yaml:7: descriptors[0].rate_limit.algorithm") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
	out, err = exec.Command(binary(t), "serve").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--config") {
		t.Fatalf("no --config: %v\n%s", err, out)
	}
}

// TestServeRedisAllOrNothing runs two processes on one redis-server: the
// counts are shared, exactly, and a refused request takes nothing.
func TestServeRedisAllOrNothing(t *testing.T) {
	url := redistest.Server(t)
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	a := startServe(t, dir, "--store", url, "--store-timeout", "10s", "--all-or-nothing")
	b := startServe(t, dir, "--store", url, "--store-timeout", "10s", "--all-or-nothing")
	n := 0
	for i := range 10 {
		p := a
		if i%2 == 1 {
			p = b
		}
		if p.ask("e2e", 0, rd("fixed", "shared")).OverallCode == rlsv3.RateLimitResponse_OK {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("%d passed across two processes, want 5", n)
	}
	// fixed:shared is exhausted: a request with it and another descriptor
	// takes nothing from the other.
	for range 3 {
		r := b.ask("e2e", 0, rd("fixed", "shared"), rd("slide", "other"))
		if summary(r) != "OVER_LIMIT OVER_LIMIT OK" {
			t.Fatalf("%v", r)
		}
	}
	if r := a.ask("e2e", 0, rd("slide", "other")); r.Statuses[0].LimitRemaining != 7 {
		t.Fatalf("the refused requests took quota: remaining %d, want 7", r.Statuses[0].LimitRemaining)
	}
}

// manyRD is n descriptors of key, each its own value.
func manyRD(key string, n int) []*ratelimitv3.RateLimitDescriptor {
	ds := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = rd(key, strconv.Itoa(i))
	}
	return ds
}

// manyJSON is a POST /json and /v1/check body of n such descriptors.
func manyJSON(domain, key string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"domain":%q,"descriptors":[`, domain)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"entries":[{"key":%q,"value":"%d"}]}`, key, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestServeRequestSizeLimits: a request of 100,000 descriptors, or of more
// entries than allowed, is refused at once, InvalidArgument over gRPC and
// 400 over the JSON API, naming the limit and the number sent; the flags
// move the limits; a 60 KB value is counted like any other.
func TestServeRequestSizeLimits(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startServe(t, dir)

	t0 := time.Now()
	_, err := p.client.ShouldRateLimit(ctx10s(t), &rlsv3.RateLimitRequest{Domain: "e2e", Descriptors: manyRD("fixed", 100_000)})
	t.Logf("gRPC, 100000 descriptors: refused in %v", time.Since(t0))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "100000 descriptors, more than the limit of 64") {
		t.Fatalf("gRPC, 100000 descriptors: %v", err)
	}
	for _, c := range []struct {
		n    int
		want string
	}{
		{20_000, "20000 descriptors, more than the limit of 64"}, // what fits in the 1 MB body
		{100_000, "request body too large"},
	} {
		body := manyJSON("e2e", "fixed", c.n)
		for _, path := range []string{"/json", "/v1/check"} {
			t0 := time.Now()
			resp, err := http.Post("http://"+p.http+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("%s, %d descriptors: %d in %v", path, c.n, resp.StatusCode, time.Since(t0))
			if resp.StatusCode != 400 || !strings.Contains(string(b), c.want) {
				t.Errorf("%s, %d descriptors: %d %s, want 400 %q", path, c.n, resp.StatusCode, b, c.want)
			}
		}
	}
	if r := p.ask("e2e", 0, manyRD("fixed", 64)...); len(r.Statuses) != 64 || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("64 descriptors: %v", summary(r))
	}
	long := strings.Repeat("v", 60<<10)
	if n := p.passes("e2e", rd("fixed", long)); n != 5 {
		t.Fatalf("a 60 KB value: %d passed, want 5", n)
	}
	if r := p.ask("e2e", 0, rd("fixed", long+"w")); r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("another 60 KB value shares a count: %v", r)
	}

	q := startServe(t, dir, "--max-descriptors", "2", "--max-entries", "1")
	for _, c := range []struct {
		ds   []*ratelimitv3.RateLimitDescriptor
		want string
	}{
		{manyRD("fixed", 3), "3 descriptors, more than the limit of 2"},
		{[]*ratelimitv3.RateLimitDescriptor{rd("team", "a", "user", "u")}, "descriptor 0 has 2 entries, more than the limit of 1"},
	} {
		_, err := q.client.ShouldRateLimit(ctx10s(t), &rlsv3.RateLimitRequest{Domain: "e2e", Descriptors: c.ds})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("err = %v, want InvalidArgument %q", err, c.want)
		}
	}
	q.ask("e2e", 0, manyRD("fixed", 2)...)
}

// TestServeRedisBoundedKeys: on Redis, a 60 KB descriptor value makes a
// short key, and a short value the key it always had.
func TestServeRedisBoundedKeys(t *testing.T) {
	url := redistest.Server(t)
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	p := startServe(t, dir, "--store", url, "--store-timeout", "10s")
	p.ask("e2e", 0, rd("fixed", strings.Repeat("v", 60<<10)))
	p.ask("e2e", 0, rd("fixed", "short"))
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	all, err := rc.Keys(ctx10s(t), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The store's own probe at start (rk:{probe}:probe) is no client's key.
	keys := slices.DeleteFunc(all, func(k string) bool { return strings.HasPrefix(k, "rk:{probe") })
	short := false
	for _, k := range keys {
		if len(k) > 200 {
			t.Errorf("a key of %d bytes: %.80q…", len(k), k)
		}
		short = short || strings.Contains(k, "rls:3:e2e_5:fixed5:short")
	}
	if len(keys) != 2 || !short {
		t.Fatalf("keys %q: want two, one of them rls:3:e2e_5:fixed5:short", keys)
	}
}
