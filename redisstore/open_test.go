package redisstore

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestNewClientForms(t *testing.T) {
	c, err := NewClient("redis://u:secret@127.0.0.1:6390/3")
	if err != nil {
		t.Fatal(err)
	}
	o := c.(*redis.Client).Options()
	if o.Addr != "127.0.0.1:6390" || o.DB != 3 || o.Username != "u" || o.Password != "secret" || o.Protocol != 2 {
		t.Errorf("redis://: %+v", o)
	}
	c.Close()

	c, err = NewClient("rediss://127.0.0.1:6390/0")
	if err != nil {
		t.Fatal(err)
	}
	if c.(*redis.Client).Options().TLSConfig == nil {
		t.Error("rediss:// without TLS")
	}
	c.Close()

	fo, err := parseSentinel("redis", "u:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster/2?sentinel_password=sp&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if fo.MasterName != "mymaster" || fo.DB != 2 || len(fo.SentinelAddrs) != 2 || fo.SentinelAddrs[1] != "10.0.0.2:26379" ||
		fo.Username != "u" || fo.Password != "pw" || fo.SentinelPassword != "sp" || fo.DialTimeout.Seconds() != 2 {
		t.Errorf("sentinel: %+v", fo)
	}

	co, err := parseCluster("rediss", ":pw@10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000?read_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	if len(co.Addrs) != 3 || co.Addrs[2] != "10.0.0.3:7000" || co.Password != "pw" || co.TLSConfig == nil || co.ReadTimeout.Seconds() != 1 {
		t.Errorf("cluster: %+v", co)
	}

	for _, bad := range []string{
		"", "127.0.0.1:6379", "http://x", "redis+sentinel://h1,h2", "redis+sentinel://h1,,h2/m",
		"redis+cluster://h1,h2/0", "redis+cluster://", "redis://h:1/x",
	} {
		if c, err := NewClient(bad); err == nil {
			c.Close()
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:secret@h:1/0":                           "redis://u:xxxxx@h:1/0",
		"redis+sentinel://:pw@h1,h2/m?sentinel_password=x": "redis+sentinel://:xxxxx@h1,h2/m?...",
		"redis://h:1": "redis://h:1",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzNewClient: any string either fails to parse or gives a client; the
// error never shows a password.
func FuzzNewClient(f *testing.F) {
	for _, s := range []string{
		"redis://u:secret@127.0.0.1:6379/0", "rediss://h:1", "unix:///tmp/r.sock",
		"redis+sentinel://u:secret@h1:26379,h2:26379/m/1?sentinel_password=secret",
		"redis+cluster://:secret@h1:7000,h2:7000", "redis+cluster://secret@", "redis://:secret@[::1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := NewClient(s)
		if err != nil {
			if strings.Contains(s, "secret") && strings.Contains(err.Error(), ":secret@") {
				t.Fatalf("%q: error shows the password: %v", s, err)
			}
			return
		}
		c.Close()
	})
}

// TestNewClientTLS: a TLS config reaches every form's connections, only a
// TLS URL takes one, and no form pins every server to its first host's
// name.
func TestNewClientTLS(t *testing.T) {
	mine := &tls.Config{MinVersion: tls.VersionTLS13}
	c, err := NewClient("rediss://127.0.0.1:6390/0", WithTLSConfig(mine))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.(*redis.Client).Options().TLSConfig; got != mine {
		t.Errorf("rediss://: TLS config %+v, want the one given", got)
	}
	c.Close()

	c, err = NewClient("rediss+cluster://n1:7000,n2:7000", WithTLSConfig(mine))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.(*redis.ClusterClient).Options().TLSConfig; got != mine {
		t.Errorf("rediss+cluster://: TLS config %+v, want the one given", got)
	}
	c.Close()

	c, err = NewClient("rediss+sentinel://s1:26379,s2:26379/m?skip_verify=true", WithTLSConfig(mine))
	if err != nil {
		t.Fatal(err)
	}
	// The failover client's Options are the data nodes'; the same
	// FailoverOptions.TLSConfig serves the sentinels.
	if got := c.(*redis.Client).Options().TLSConfig; got.MinVersion != tls.VersionTLS13 || !got.InsecureSkipVerify || mine.InsecureSkipVerify {
		t.Errorf("rediss+sentinel:// with skip_verify: %+v (given %+v)", got, mine)
	}
	c.Close()

	// Without a config of one's own, no server name either: each node is
	// verified by its own host, not n1's.
	c, err = NewClient("rediss+cluster://n1:7000,n2:7000")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.(*redis.ClusterClient).Options().TLSConfig; got == nil || got.ServerName != "" {
		t.Errorf("rediss+cluster://: %+v, want TLS and no server name", got)
	}
	c.Close()

	for _, clear := range []string{"redis://h:1/0", "unix:///tmp/r.sock", "redis+sentinel://s1:26379/m", "redis+cluster://n1:7000"} {
		if c, err := NewClient(clear, WithTLSConfig(mine)); err == nil || !strings.Contains(err.Error(), "rediss://") {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s with a TLS config: %v, want an error pointing to rediss://", clear, err)
		}
	}
	c, err = NewClient("redis://h:1/0", WithTLSConfig(nil))
	if err != nil || c.(*redis.Client).Options().TLSConfig != nil {
		t.Errorf("a nil TLS config: %v", err)
	}
	c.Close()
}
