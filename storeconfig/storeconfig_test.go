package storeconfig

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func TestValidate(t *testing.T) {
	good := []Config{{}, {URL: "memory://"}, {URL: "redis://127.0.0.1:6379/0", Timeout: time.Second, OnError: "deny", Instances: 3},
		{URL: "redis://h:1", Mode: "sync", SyncPeriod: time.Millisecond}, {URL: "redis://h:1", Mode: "lease", SyncPeriod: time.Minute}}
	for _, c := range good {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []Config{{URL: "ftp://x"}, {OnError: "maybe"}, {Timeout: -1}, {Instances: -2},
		{Mode: "eventual"}, {Mode: "Sync"}, {SyncPeriod: -time.Second}, {SyncPeriod: time.Microsecond}, {SyncPeriod: time.Hour}}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestOpenMemory(t *testing.T) {
	s, closer, err := Open(context.Background(), Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	lim := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Hour}
	d, err := s.Take(context.Background(), ratekeeper.Request{Key: "k", Limit: lim, N: 1})
	if err != nil || !d.Allowed {
		t.Fatalf("first take: %+v %v", d, err)
	}
	d, _ = s.Take(context.Background(), ratekeeper.Request{Key: "k", Limit: lim, N: 1})
	if d.Allowed {
		t.Fatal("second take allowed")
	}
}

func TestFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	RegisterFlags(fs, &c)
	if err := fs.Parse([]string{"--store", "redis://h:1", "--store-timeout", "20ms", "--store-on-error", "local", "--store-instances", "4", "--store-mode", "lease", "--store-sync-period", "10ms"}); err != nil {
		t.Fatal(err)
	}
	want := Config{URL: "redis://h:1", Timeout: 20 * time.Millisecond, OnError: "local", Instances: 4, Mode: "lease", SyncPeriod: 10 * time.Millisecond}
	if c != want {
		t.Fatalf("got %+v, want %+v", c, want)
	}
}

func TestOpenRedisBadURL(t *testing.T) {
	_, _, err := Open(context.Background(), Config{URL: "redis+cluster://", Timeout: 100 * time.Millisecond}, nil)
	if err == nil {
		t.Fatal("Open accepted a cluster URL without addresses")
	}
}
