package storeconfig

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/tlstest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/tlsconfig"
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
	flags := flag.NewFlagSet("x", flag.ContinueOnError)
	RegisterFlags(flags, &c)
	if err := flags.Parse([]string{"--store", "rediss://h:1", "--store-timeout", "20ms", "--store-on-error", "local", "--store-instances", "4", "--store-mode", "lease", "--store-sync-period", "10ms", "--store-require",
		"--store-tls-ca-file", "ca.pem", "--store-tls-cert-file", "c.pem", "--store-tls-key-file", "c.key", "--store-tls-server-name", "redis.internal"}); err != nil {
		t.Fatal(err)
	}
	want := Config{URL: "rediss://h:1", Timeout: 20 * time.Millisecond, OnError: "local", Instances: 4, Mode: "lease", SyncPeriod: 10 * time.Millisecond, Require: true,
		TLS: tlsconfig.Client{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "c.key", ServerName: "redis.internal"}}
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

// TestValidateTLS: tls needs a TLS URL, and its files must load; each
// error names its field under tls.
func TestValidateTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "store CA")
	dir := t.TempDir()
	caFile := ca.Write(t, dir, "ca")
	cert, key := ca.Client(t, "ratekeeper").Write(t, dir, "client")
	_, otherKey := ca.Client(t, "other").Write(t, dir, "other")
	good := tlsconfig.Client{CAFile: caFile, CertFile: cert, KeyFile: key, ServerName: "redis.internal"}
	for _, u := range []string{"rediss://h:1/0", "rediss+sentinel://h1:26379,h2:26379/m", "rediss+cluster://h1:7000,h2:7000"} {
		if err := (Config{URL: u, TLS: good}).Validate(); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"redis://h:1/0", "redis+sentinel://h1:26379/m", "redis+cluster://h1:7000", "unix:///tmp/r.sock", "memory://", ""} {
		err := (Config{URL: u, TLS: tlsconfig.Client{CAFile: caFile}}).Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "tls: ") || !strings.Contains(err.Error(), "use rediss://") {
			t.Errorf("%q with tls: %v, want an error naming tls and rediss://", u, err)
		}
	}
	for _, c := range []struct {
		tls   tlsconfig.Client
		field string
		is    error
	}{
		{tlsconfig.Client{CAFile: filepath.Join(dir, "missing.crt")}, "tls.ca_file: open ", fs.ErrNotExist},
		{tlsconfig.Client{CAFile: key}, "tls.ca_file: ", nil},
		{tlsconfig.Client{CertFile: cert}, "tls.key_file: ", nil},
		{tlsconfig.Client{CertFile: cert, KeyFile: otherKey}, "tls.key_file: ", nil},
		{tlsconfig.Client{CertFile: cert, KeyFile: filepath.Join(dir, "nokey")}, "tls.key_file: open ", fs.ErrNotExist},
	} {
		err := (Config{URL: "rediss://h:1", TLS: c.tls}).Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.field) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%+v: %v, want %q...", c.tls, err, c.field)
		}
	}
}

func TestResolve(t *testing.T) {
	c := Config{URL: "rediss://h:1", TLS: tlsconfig.Client{CAFile: "ca.crt", CertFile: "/etc/ratekeeper/c.crt", KeyFile: "keys/c.key", ServerName: "redis"}}
	got := c.Resolve("/srv/conf")
	want := Config{URL: "rediss://h:1", TLS: tlsconfig.Client{CAFile: "/srv/conf/ca.crt", CertFile: "/etc/ratekeeper/c.crt", KeyFile: "/srv/conf/keys/c.key", ServerName: "redis"}}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if c.TLS.CAFile != "ca.crt" {
		t.Fatal("Resolve changed its receiver")
	}
	if (Config{}).Resolve("/x") != (Config{}) {
		t.Fatal("Resolve made paths of nothing")
	}
}

// TestString: the log line says TLS is on and which files and name, never
// a password or a key's contents.
func TestString(t *testing.T) {
	key := filepath.Join(t.TempDir(), "c.key")
	if err := os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----"), 0o600); err != nil {
		t.Fatal(err)
	}
	for c, want := range map[Config]string{
		{URL: "redis://:pw@h:1/0"}:  "redis://:xxxxx@h:1/0 (timeout 50ms, on_error allow, instances 1, mode exact)",
		{URL: "rediss://:pw@h:1/0"}: "rediss://:xxxxx@h:1/0 (timeout 50ms, on_error allow, instances 1, mode exact, TLS: the system's CAs)",
		{URL: "rediss+cluster://h:1,h:2", TLS: tlsconfig.Client{CAFile: "/ca.crt", CertFile: "/c.crt", KeyFile: key, ServerName: "redis"}}: "rediss+cluster://h:1,h:2 (timeout 50ms, on_error allow, instances 1, mode exact, TLS: ca_file /ca.crt, client certificate /c.crt, server_name redis)",
		{URL: "rediss://h:1", TLS: tlsconfig.Client{InsecureSkipVerify: true}}:                                                             "rediss://h:1 (timeout 50ms, on_error allow, instances 1, mode exact, TLS: the system's CAs, insecure_skip_verify: any server certificate accepted)",
		{}: "memory://",
	} {
		if got := c.String(); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
		if s := c.String(); strings.Contains(s, "pw") || strings.Contains(s, "PRIVATE") {
			t.Errorf("%s shows a secret", s)
		}
	}
}

// TestValidatePasswordAndMaxKeys: each way to get the password or the key
// cap wrong is an error that names the field.
func TestValidatePasswordAndMaxKeys(t *testing.T) {
	dir := t.TempDir()
	good, empty := filepath.Join(dir, "pw"), filepath.Join(dir, "empty")
	os.WriteFile(good, []byte("pw\r\n"), 0o600)
	os.WriteFile(empty, []byte("\n"), 0o600)
	if p, err := readPassword(good); err != nil || p != "pw" {
		t.Fatalf("readPassword = %q %v, want pw without its line ending", p, err)
	}
	for _, c := range []Config{{MaxKeys: 10}, {URL: "redis://h:1", PasswordFile: good}, {URL: "redis://user@h:1", Password: "x"}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, tt := range []struct {
		c     Config
		field string
	}{
		{Config{MaxKeys: -1}, "max_keys"},
		{Config{URL: "redis://h:1", MaxKeys: 10}, "max_keys"},
		{Config{PasswordFile: good}, "password_file"},
		{Config{URL: "redis://h:1", PasswordFile: good, Password: "x"}, "password_file"},
		{Config{URL: "redis://:inurl@h:1", PasswordFile: good}, "password_file"},
		{Config{URL: "redis://:inurl@h:1", Password: "x"}, "password_file"},
		{Config{URL: "redis://h:1", PasswordFile: empty}, "password_file"},
		{Config{URL: "redis://h:1", PasswordFile: filepath.Join(dir, "missing")}, "password_file"},
	} {
		err := tt.c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tt.field+":") {
			t.Errorf("%+v: %v, want an error about %s", tt.c, err, tt.field)
		}
	}
}

// TestMaxKeys: the memory store holds at most about max_keys keys: past
// the cap new keys evict idle ones, which the default cap does not do for
// as few keys.
func TestMaxKeys(t *testing.T) {
	lim := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Hour}
	for _, tt := range []struct {
		max   int
		evict bool
	}{{64, true}, {0, false}} {
		s, closer, err := Open(context.Background(), Config{MaxKeys: tt.max}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2000 {
			s.Take(context.Background(), ratekeeper.Request{Key: fmt.Sprint("k", i), Limit: lim, N: 1})
		}
		n := s.(*memstore.Store).Evictions()
		closer.Close()
		if (n > 0) != tt.evict {
			t.Errorf("max_keys %d: %d evictions for 2000 keys", tt.max, n)
		}
	}
}

// TestSecretsNeverShown: a Sentinel's password rides in the URL's query
// (sentinel_password, which redisstore reads) and url.URL.Redacted hides
// only the userinfo's; a URL that does not parse is echoed whole by
// url.Parse's error. Neither Redacted (GET /v1/rules, serve's /v1/config),
// String (the start and reload log lines) nor Validate's error (check, the
// start) may show either secret.
func TestSecretsNeverShown(t *testing.T) {
	for _, u := range []string{
		"redis+sentinel://h1:26379,h2:26379/mymaster?sentinel_password=s3cret-sentinel",
		"rediss+sentinel://:s3cret-data@h1:26379/mymaster?sentinel_username=u&sentinel_password=s3cret-sentinel",
		"redis://:s3cret%zz@h:6379/0",
		"redis://u:s3cret@h:6379/%zz",
		"redis://:s3cret@h:6379/0?dial_timeout=1s&sentinel_password=s3cret",
	} {
		c := Config{URL: u}
		shown := map[string]string{"Redacted": c.Redacted(), "String": c.String()}
		if err := c.Validate(); err != nil {
			shown["Validate"] = err.Error()
		}
		for what, s := range shown {
			if strings.Contains(s, "s3cret") {
				t.Errorf("%s of %s shows a secret: %s", what, u, s)
			}
		}
	}
	if got := (Config{URL: "redis+sentinel://h1:26379/mymaster?sentinel_password=x"}).Redacted(); !strings.HasPrefix(got, "redis+sentinel://h1:26379/mymaster?") {
		t.Errorf("Redacted hides more than the secret: %s", got)
	}
}
