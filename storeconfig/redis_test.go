package storeconfig

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestOpenRedis opens a real redis-server through the config, decides on
// it, and reads the failsafe counters once Redis is gone.
func TestOpenRedis(t *testing.T) {
	in := redistest.Start(t)
	s, closer, err := Open(context.Background(), Config{URL: in.URL(), Timeout: 200 * time.Millisecond, OnError: "deny"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	lim := ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 1, Period: time.Hour}
	if d, err := s.Take(context.Background(), ratekeeper.Request{Key: "storeconfig-k", Limit: lim, N: 1}); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v %v", d, err)
	}
	if d, _ := s.Take(context.Background(), ratekeeper.Request{Key: "storeconfig-k", Limit: lim, N: 1}); d.Allowed {
		t.Fatal("second take allowed: counters not in Redis")
	}
	fs, ok := s.(*failsafe.Store)
	if !ok {
		t.Fatal("a Redis store is not failsafe-wrapped")
	}
	// With Redis gone, on_error: deny refuses, and the counters show it.
	in.Kill()
	if d, err := s.Take(context.Background(), ratekeeper.Request{Key: "storeconfig-other", Limit: lim, N: 1}); err != nil || d.Allowed {
		t.Fatalf("with Redis down and on_error deny: %+v %v", d, err)
	}
	if st := fs.Stats(); st.FallbackDenied < 1 || st.Errors < 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestOpenRedisDown: a server whose Redis is down when it starts still
// starts (a warning names the store), decides by on_error meanwhile, and
// decides from Redis once Redis answers.
func TestOpenRedisDown(t *testing.T) {
	in := redistest.Start(t)
	in.Kill()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s, closer, err := Open(context.Background(), Config{URL: in.URL(), Timeout: 100 * time.Millisecond, OnError: "allow"}, logger)
	if err != nil {
		t.Fatalf("Open with Redis down: %v", err)
	}
	defer closer.Close()
	if !strings.Contains(logs.String(), "does not answer") || !strings.Contains(logs.String(), in.Addr()) {
		t.Fatalf("no warning naming the store: %s", logs.String())
	}
	lim := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Hour}
	take := func(key string) ratekeeper.Decision {
		d, err := s.Take(context.Background(), ratekeeper.Request{Key: key, Limit: lim, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Fail open: both of two requests over a limit of one pass.
	if first, second := take("down"), take("down"); !first.Allowed || !second.Allowed {
		t.Fatal("with Redis down and on_error allow, a request was refused")
	}
	in.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		key := fmt.Sprint("up-", i)
		if take(key).Allowed && !take(key).Allowed {
			return // the second request was refused: the count is in Redis
		}
		if time.Now().After(deadline) {
			t.Fatal("decisions did not come from Redis within 10 s of its return")
		}
		time.Sleep(5 * time.Millisecond) // the next poll
	}
}

// A store opened in exact mode decides a limit given lease mode locally,
// the others in Redis, and the store's counters show it.
func TestSetLimitModes(t *testing.T) {
	in := redistest.Start(t)
	s, closer, err := Open(context.Background(), Config{URL: in.URL(), Timeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	global := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000, Period: time.Second}
	perClient := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 5, Period: time.Second}
	if err := SetLimitModes(s, map[ratekeeper.Limit]string{global: "lease"}); err != nil {
		t.Fatal(err)
	}
	if err := SetLimitModes(s, map[ratekeeper.Limit]string{global: "eventual"}); err == nil {
		t.Error("an unknown mode was accepted")
	}
	ctx := context.Background()
	for range 50 {
		s.Take(ctx, ratekeeper.Request{Key: "all", Limit: global, N: 1})
		s.Take(ctx, ratekeeper.Request{Key: "client", Limit: perClient, N: 1})
	}
	local := s.(*failsafe.Store).Primary().(*redisstore.Store).SharedStats().LocalDecisions
	if local < 40 || local > 50 {
		t.Errorf("%v local decisions, want the global limit's (nearly 50) and none of the per-client one's", local)
	}
}

// TestPassword: Redis's password from password_file or from Password (the
// commands' RATEKEEPER_STORE_PASSWORD), never needed in the URL, on a real
// redis-server that requires it; without it, or with a wrong one, the
// store does not open (the server would not start).
func TestPassword(t *testing.T) {
	in := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: in.Addr()})
	if err := admin.ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lim := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Hour}
	for _, tt := range []struct {
		name    string
		c       Config
		refused bool
	}{
		{"password_file", Config{PasswordFile: file}, false},
		{"Password", Config{Password: "s3cret"}, false},
		{"none", Config{}, true},
		{"wrong", Config{Password: "guess"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			c.URL, c.OnError, c.Timeout = in.URL(), "deny", time.Second
			s, closer, err := Open(ctx, c, nil)
			if tt.refused {
				if err == nil {
					closer.Close()
					t.Fatal("opened with a wrong password")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			d, err := s.Take(ctx, ratekeeper.Request{Key: "password-" + tt.name, Limit: lim, N: 1})
			if err != nil || d.Fallback != ratekeeper.NoFallback {
				t.Fatalf("%+v %v; want a decision from Redis", d, err)
			}
			if !strings.Contains(c.String(), "password from") {
				t.Errorf("String() = %q, want where the password comes from", c.String())
			}
			if strings.Contains(c.String(), "s3cret") {
				t.Errorf("String() = %q shows the password", c.String())
			}
		})
	}
}
