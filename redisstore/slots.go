package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

// Interface guard.
var _ ratekeeper.ConcurrencyStore = (*Store)(nil)

// slotsScript is scripts/slots.lua: one atomic round trip per call, on the
// one key of the slots' client key, so it runs on Cluster as it does on one
// server. Slot calls are not pipelined with decisions: there is one per
// request start and one per request end, each on its own key.
var slotsScript = redis.NewScript(file("slots.lua"))

// SlotKey is the Redis key of the sorted set that holds key's concurrency
// slots: in the hash tag of key, like Key.
func (s *Store) SlotKey(key string) string {
	if hasHashTag(key) {
		return s.prefix + key + ":cc"
	}
	return s.prefix + "{" + key + "}:cc"
}

func slotArgs(op string, req ratekeeper.SlotRequest) []any {
	now := ""
	if !req.Now.IsZero() {
		now = strconv.FormatInt(req.Now.UnixMicro(), 10)
	}
	return []any{op, req.ID, req.Max, int64(req.TTL / time.Microsecond), now}
}

func (s *Store) slots(ctx context.Context, op string, req ratekeeper.SlotRequest) (allowed bool, n, now int64, err error) {
	key := s.SlotKey(req.Key)
	args := append(slotArgs(op, req), s.leastMS)
	v, err := slotsScript.Run(ctx, s.client, []string{key}, args...).Int64Slice()
	if err != nil {
		return false, 0, 0, fmt.Errorf("redisstore: slots: %w", err)
	}
	s.answeredKey(key)
	if len(v) != 3 {
		return false, 0, 0, fmt.Errorf("redisstore: slots: script answered %d values", len(v))
	}
	return v[0] == 1, v[1], v[2], nil
}

// AcquireSlot drops key's expired leases and takes slot ID if fewer than
// Max are held, in one script run, at Redis's clock unless req.Now is set.
// When the call fails once sent (its context ended, the reply was lost),
// Redis may still take the slot. The store then cancels it in the
// background (see cancels), so that it does not stand unreleased for TTL.
func (s *Store) AcquireSlot(ctx context.Context, req ratekeeper.SlotRequest) (ratekeeper.Decision, error) {
	if err := ctx.Err(); err != nil {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: slots: %w", err)
	}
	ok, n, now, err := s.slots(ctx, "a", req)
	if err != nil {
		s.cancels.add(req)
		return ratekeeper.Decision{}, err
	}
	d := ratekeeper.Decision{Allowed: ok, Limit: req.Max, At: time.UnixMicro(now)}
	if ok {
		d.Remaining = max(0, req.Max-int(n))
	}
	return d, nil
}

// RefreshSlot extends slot ID's lease to Now+TTL if it is still held.
func (s *Store) RefreshSlot(ctx context.Context, req ratekeeper.SlotRequest, _ ratekeeper.Decision) (bool, error) {
	ok, _, _, err := s.slots(ctx, "f", req)
	return ok, err
}

// ReleaseSlot frees slot ID.
func (s *Store) ReleaseSlot(ctx context.Context, req ratekeeper.SlotRequest, _ ratekeeper.Decision) error {
	_, _, _, err := s.slots(ctx, "r", req)
	return err
}

// InFlight is how many unexpired slots key holds now, at Redis's clock.
func (s *Store) InFlight(ctx context.Context, key string) (int, error) {
	t, err := s.client.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstore: time: %w", err)
	}
	n, err := s.client.ZCount(ctx, s.SlotKey(key), "("+strconv.FormatInt(t.UnixMicro(), 10), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("redisstore: zcount: %w", err)
	}
	return int(n), nil
}
