package storeconfig

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestOpenRefusesMisconfiguredRedis: a Redis that answers but refuses the
// configuration (a database it does not have, a wrong password or user, a
// user that may not run the store's scripts or write its keys)
// stops the start, with an error naming the store and Redis's own reason,
// whatever on_error says: falling back to on_error would limit nothing
// (allow) or everything (deny) until someone reads a warning.
func TestOpenRefusesMisconfiguredRedis(t *testing.T) {
	in := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: in.Addr()})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">apppass", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	for _, u := range [][]any{
		{"ACL", "SETUSER", "noscripts", "on", ">apppass", "~*", "+@all", "-@scripting"},
		{"ACL", "SETUSER", "otherkeys", "on", ">apppass", "~app:*", "+@all"},
	} {
		if err := admin.Do(ctx, u...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	base := "redis://" + in.Addr()
	for _, tt := range []struct {
		name string
		c    Config
		want string // in the error, beside the store's address
	}{
		{"database out of range", Config{URL: base + "/99", Password: "s3cret"}, "DB index is out of range"},
		{"no password", Config{URL: base + "/0"}, "NOAUTH"},
		{"wrong password", Config{URL: base + "/0", Password: "guess"}, "WRONGPASS"},
		{"unknown ACL user", Config{URL: "redis://nobody:apppass@" + in.Addr() + "/0"}, "WRONGPASS"},
		{"ACL user without scripts", Config{URL: "redis://noscripts:apppass@" + in.Addr() + "/0"}, "NOPERM"},
		{"ACL user without the store's keys", Config{URL: "redis://otherkeys:apppass@" + in.Addr() + "/0"}, "NOPERM"},
		{"cluster URL, standalone server", Config{URL: "redis+cluster://default:s3cret@" + in.Addr()}, "cluster support disabled"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c
			c.OnError, c.Timeout = "allow", time.Second
			_, closer, err := Open(ctx, c, nil)
			if err == nil {
				closer.Close()
				t.Fatal("Open started on a Redis that refuses the configuration")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), in.Addr()) {
				t.Errorf("error %q, want Redis's reason %q and the store's address", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "apppass") {
				t.Errorf("error %q shows a password", err)
			}
		})
	}
	t.Run("right user", func(t *testing.T) {
		_, closer, err := Open(ctx, Config{URL: "redis://app:apppass@" + in.Addr() + "/0"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		closer.Close()
	})
}

// TestOpenRefusesStandaloneURLOnCluster: a redis:// URL that names a node
// of a Redis Cluster would send every key to that node, which answers
// MOVED for most of them: the start stops and says to use redis+cluster://.
func TestOpenRefusesStandaloneURLOnCluster(t *testing.T) {
	cluster := redistest.Cluster(t)
	first, _, _ := strings.Cut(strings.TrimPrefix(cluster, "redis+cluster://"), ",")
	_, closer, err := Open(context.Background(), Config{URL: "redis://" + first + "/0"}, nil)
	if err == nil {
		closer.Close()
		t.Fatal("Open started with a redis:// URL on a cluster node")
	}
	if !strings.Contains(err.Error(), "redis+cluster://") || !strings.Contains(err.Error(), first) {
		t.Errorf("error %q, want the fix (redis+cluster://) and the address", err)
	}
}

// TestOpenRedisRequire: a Redis that does not answer at all starts the
// server by default, with a warning that carries the real error (here
// "connection refused", not a timeout); with Require it stops the start.
func TestOpenRedisRequire(t *testing.T) {
	in := redistest.Start(t)
	in.Kill()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	c := Config{URL: in.URL(), Timeout: 50 * time.Millisecond}
	_, closer, err := Open(context.Background(), c, logger)
	if err != nil {
		t.Fatalf("without require: %v", err)
	}
	closer.Close()
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the warning does not say what happened: %s", logs.String())
	}
	c.Require = true
	_, closer, err = Open(context.Background(), c, logger)
	if err == nil {
		closer.Close()
		t.Fatal("with require, Open started without Redis")
	}
	for _, want := range []string{in.Addr(), "connection refused", "require"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestValidateRejectsWhatRedisWould: Validate (and so ratekeeper check)
// rejects, offline, every URL that Open would refuse before it dials.
func TestValidateRejectsWhatRedisWould(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"redis://127.0.0.1:6379/0?foo=bar", "foo"},
		{"redis://127.0.0.1:6379/zero", "zero"},
		{"redis+cluster://127.0.0.1:7000/1", "no databases"},
		{"redis+sentinel://127.0.0.1:26379", "master name"},
		{"redis://127.0.0.1:6379/0?dial_timeout=soon", "dial_timeout"},
	} {
		err := Config{URL: tt.url}.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error about %q", tt.url, err, tt.want)
		}
	}
}

// TestOpenRefusesSentinelMisconfig: a Sentinel URL that names a server
// that is no sentinel, or a master the sentinels do not know, stops the
// start; a sentinel that does not answer does not.
func TestOpenRefusesSentinelMisconfig(t *testing.T) {
	plain := redistest.Start(t)
	sentinel := redistest.Sentinel(t)
	addr, _, _ := strings.Cut(strings.TrimPrefix(sentinel, "redis+sentinel://"), "/")
	for _, tt := range []struct{ name, url, want string }{
		{"not a sentinel", "redis+sentinel://" + plain.Addr() + "/" + redistest.MasterName, "sentinel"},
		{"unknown master", "redis+sentinel://" + addr + "/nosuchmaster", "nosuchmaster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, closer, err := Open(context.Background(), Config{URL: tt.url, Timeout: time.Second}, nil)
			if err == nil {
				closer.Close()
				t.Fatal("Open started")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "refuses") {
				t.Errorf("error %q, want a refusal about %q", err, tt.want)
			}
		})
	}
	_, closer, err := Open(context.Background(), Config{URL: sentinel, Timeout: time.Second}, nil)
	if err != nil {
		t.Fatalf("the right master: %v", err)
	}
	closer.Close()
}

// TestOpenRedisDownSaysWhy: a Ping that runs out of time while go-redis
// dials again and again would say "context deadline exceeded"; the
// warning says what the dials met instead.
func TestOpenRedisDownSaysWhy(t *testing.T) {
	in := redistest.Start(t)
	in.Kill()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, closer, err := Open(ctx, Config{URL: in.URL(), Timeout: 50 * time.Millisecond}, logger)
	if err != nil {
		t.Fatal(err)
	}
	closer.Close()
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the warning does not say what happened: %s", logs.String())
	}
}
