package redisstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// Interface guard.
var _ ratekeeper.BatchStore = (*Store)(nil)

// TakeAll decides reqs as one, all or none. When their keys share a slot,
// one script run takes them all and, if one is refused, gives back the
// others before anything else can run. Keys always share it on a standalone
// or Sentinel-managed server, and on Cluster when they share a hash tag.
// Otherwise, and when a request is decided locally (sync and lease modes),
// TakeAll goes through ratekeeper.TakeEach. Keys must be distinct. A
// limit that Limit.Validate refuses is an error, and nothing is sent.
func (s *Store) TakeAll(ctx context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) (bool, error) {
	for _, req := range reqs {
		if err := req.Limit.Validate(); err != nil {
			return false, fmt.Errorf("redisstore: take all: %w", err)
		}
	}
	switch {
	case len(reqs) == 0:
		return true, nil
	case len(reqs) == 1:
		d, err := s.Take(ctx, reqs[0])
		out[0] = d
		return err == nil && d.Allowed, err
	case !s.oneSlot(reqs) || s.decidesAny(reqs):
		// A locally decided request is refunded locally, which is exact.
		return ratekeeper.TakeEach(ctx, reqs, out, s.Take, s.Refund)
	}
	j, err := s.batchJob(reqs, 0, false)
	if err != nil {
		return false, err
	}
	v, err := s.run(ctx, j)
	if at, ok := skewInstant(err); ok {
		s.noteSkew(ctx, at)
		j, _ = s.batchJob(reqs, at, true)
		v, err = s.run(ctx, j)
	}
	if err != nil {
		return false, fmt.Errorf("redisstore: take all (%d requests): %w", len(reqs), skewed(err))
	}
	if want := 8 + decisionSize*len(reqs); len(v) != want {
		return false, fmt.Errorf("redisstore: take all: script answered %d bytes, want %d", len(v), want)
	}
	for i, req := range reqs {
		out[i] = decision(req, v[8+decisionSize*i:8+decisionSize*(i+1)])
	}
	all := float(v, 0) == 1
	if !all {
		ratekeeper.Untaken(reqs, out) // the script takes each, then gives back
	}
	return all, nil
}

// batchJob is the run of batch.lua that takes all of reqs at once. If
// around, calendar boundaries are sent around the instant at (a retry
// after a skew error), else around the batch's instant or this host's
// clock.
func (s *Store) batchJob(reqs []ratekeeper.Request, at int64, around bool) (job, error) {
	keys := make([]string, len(reqs))
	args := make([]any, 1, 1+3*len(reqs))
	var now [8]byte
	putFloat(now[:], nowFloat(reqs[0].Now))
	args[0] = string(now[:])
	for i, req := range reqs {
		a := algoIndex(req.Limit.Algorithm)
		if a < 0 {
			return job{}, fmt.Errorf("redisstore: unknown algorithm %q", req.Limit.Algorithm)
		}
		keys[i] = s.Key(req.Key, req.Limit.Algorithm)
		if req.Limit.LogRejected {
			// A batch that fails takes nothing, penalties included (as in
			// the memory store); one that passes refuses nobody.
			req.Limit.LogRejected = false
		}
		req.Now = reqs[0].Now // the batch's instant, around which a calendar's boundaries are sent
		limit := s.limitArg(req, 'm', 0)
		if around && req.Limit.Calendar != "" {
			limit = &newCalArg(req.Limit, at, s.leastMS).arg
		}
		args = append(args, a+1, callArg(takeOp(req), req.N, time.Time{}), limit.boxed)
	}
	return job{script: s.batchScript, algo: -1, keys: keys, args: args}, nil
}

// oneSlot reports whether every request's key is in one slot: always
// unless the client is a Cluster's; there, when they share a hash tag.
func (s *Store) oneSlot(reqs []ratekeeper.Request) bool {
	if _, ok := s.client.(*redis.ClusterClient); !ok {
		return true
	}
	tag := hashTag(s.Key(reqs[0].Key, reqs[0].Limit.Algorithm))
	for _, r := range reqs[1:] {
		if hashTag(s.Key(r.Key, r.Limit.Algorithm)) != tag {
			return false
		}
	}
	return true
}

// hashTag is the part of key Redis Cluster hashes: between the first '{'
// and the next '}' if that is not empty, else the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// takeOp is the script op for a decision on req.
func takeOp(req ratekeeper.Request) byte {
	if req.Reserve {
		switch req.Limit.Algorithm {
		case ratekeeper.TokenBucket:
			return 'd'
		case ratekeeper.LeakyBucket:
			return 'q'
		}
	}
	return 'm'
}

// decisionSize is the length of a script's packed decision: six doubles.
const decisionSize = 6 * 8

// float is the i-th little-endian double of v.
func float(v string, i int) float64 {
	v = v[8*i : 8*i+8]
	var u uint64
	for j := 7; j >= 0; j-- {
		u = u<<8 | uint64(v[j])
	}
	return math.Float64frombits(u)
}

// decision converts a script's packed decision v: allowed, remaining,
// retry_after, reset_after, delay, at (scripts/prelude.lua).
func decision(req ratekeeper.Request, v string) ratekeeper.Decision {
	return algo.Decision(algo.Result{
		Allowed:    float(v, 0) == 1,
		Limit:      int64(req.Limit.Capacity()),
		Remaining:  int64(float(v, 1)),
		RetryAfter: int64(float(v, 2)),
		ResetAfter: int64(float(v, 3)),
		Delay:      int64(float(v, 4)),
		At:         int64(float(v, 5)),
	})
}

// decidesAny reports whether the shared engine decides any of reqs
// locally.
func (s *Store) decidesAny(reqs []ratekeeper.Request) bool {
	for _, req := range reqs {
		if s.shared.Decides(req) {
			return true
		}
	}
	return false
}
