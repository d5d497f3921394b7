package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

// probeLimit is the limit of the failsafe store's probes, which ask what a
// decision asks: a script run that writes. It runs on a key of the
// store's own, rk:{probe}:probe, or on a Cluster rk:{probe:N}:probe, an N
// whose slot the probed primary holds. Each probe counts one in a fixed
// window of a second on that key, which then expires. A PING is answered
// while decisions are not: by a Cluster electing a replica (CLUSTERDOWN),
// or a Redis at maxmemory with noeviction.
func probeLimit() ratekeeper.Limit {
	return ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1 << 30, Period: time.Second}
}

// probeTries bounds the search for a probe key on a Cluster primary: a
// primary that holds a single slot takes 16,384 tries on average, one with
// a third of them three.
const probeTries = 1 << 18

// Probe reports whether Redis decides within ctx, by a probe decision that
// counts nothing a client asked for. On a Cluster every primary must
// decide: one dead primary fails the probe.
func (s *Store) Probe(ctx context.Context) error {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return s.probe(ctx, "probe")
	}
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return s.ProbePart(ctx, m.Options().Addr)
	})
	if err != nil {
		c.ReloadState(context.Background())
		return fmt.Errorf("redisstore: probe: %w", err)
	}
	return nil
}

// ProbePart reports whether the Cluster primary at address part decides
// within ctx, as Probe does. It is nil too when part no longer holds a
// slot (its replica took over). Without a Cluster, or for part "", it is
// Probe. The failsafe store's open circuit breaker calls it in the
// background (failsafe.NetworkStore).
func (s *Store) ProbePart(ctx context.Context, part string) error {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok || part == "" {
		return s.Probe(ctx)
	}
	key, ok, err := s.probeKey(ctx, c, part)
	if err != nil {
		return fmt.Errorf("redisstore: probe %s: %w", part, err)
	}
	if !ok {
		return nil
	}
	if err := s.probe(ctx, key); err != nil {
		c.ReloadState(context.Background())
		return fmt.Errorf("redisstore: probe %s: %w", part, err)
	}
	return nil
}

// probe makes a probe decision on tag's probe key, in Redis whatever the
// store's mode.
func (s *Store) probe(ctx context.Context, tag string) error {
	req := ratekeeper.Request{Key: tag, Limit: probeLimit(), N: 1}
	j := s.job(takeOp(req), req, 0)
	j.key = s.probeRedisKey(tag)
	v, err := s.run(ctx, j)
	if err == nil && len(v) != decisionSize {
		err = fmt.Errorf("script answered %d bytes, want %d", len(v), decisionSize)
	}
	if err != nil {
		return fmt.Errorf("redisstore: probe: %w", err)
	}
	return nil
}

// probeRedisKey is the Redis key of a probe: PREFIX{tag}:probe, which no
// client key can name (theirs end in an algorithm's suffix), so that a
// client whose key is "probe" keeps its own count.
func (s *Store) probeRedisKey(tag string) string {
	return s.prefix + "{" + tag + "}:probe"
}

// probeKey finds a probe key (probe:N) whose slot part holds now, as the
// client sees the slots; false if part holds none. The last one found for
// each part is tried first. The search (up to probeTries keys, some tens of
// milliseconds) ends with ctx's error once ctx is done.
func (s *Store) probeKey(ctx context.Context, c *redis.ClusterClient, part string) (string, bool, error) {
	on := func(k string) bool {
		m, err := c.MasterForKey(ctx, s.probeRedisKey(k))
		return err == nil && m.Options().Addr == part
	}
	if k, ok := s.probeKeys.Load(part); ok && on(k.(string)) {
		return k.(string), true, nil
	}
	for i := range probeTries {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return "", false, err
			}
		}
		k := "probe:" + strconv.Itoa(i)
		if on(k) {
			s.probeKeys.Store(part, k)
			return k, true, nil
		}
	}
	s.probeKeys.Delete(part)
	return "", false, nil
}

// Part names the Cluster primary that holds req's key now, by its address.
// It is "" when the client is not a Cluster's or the slot's primary is not
// known yet. The failsafe store keeps a circuit breaker per part
// (failsafe.NetworkStore), and sync mode syncs each part apart. Part never
// reads the slots itself (see noLoad): it runs before every decision.
func (s *Store) Part(req ratekeeper.Request) string {
	if _, ok := s.client.(*redis.ClusterClient); !ok {
		return "" // before the key, which costs an allocation
	}
	key := s.Key(req.Key, req.Limit.Algorithm)
	if key == "" {
		return ""
	}
	return s.partOfKey(key)
}

// partOfKey is Part for a Redis key.
func (s *Store) partOfKey(key string) string {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok || key == "" {
		return ""
	}
	m, err := c.MasterForKey(noLoad, key)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}
