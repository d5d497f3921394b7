package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// Interface guard.
var _ ratekeeper.BatchStore = (*Store)(nil)

// TakeAll decides reqs as one, all or none: in one script run when their
// keys share a slot (always on a standalone or Sentinel-managed server; on
// Cluster when the keys share a hash tag), which takes them all and, if one
// is refused, gives back the others before anything else can run. Otherwise
// it takes them one by one and refunds those already taken when one is
// refused, as ratekeeper.TakeAll does for stores without batches. Keys must
// be distinct.
func (s *Store) TakeAll(ctx context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) (bool, error) {
	if s.err != nil {
		return false, s.err
	}
	switch {
	case len(reqs) == 0:
		return true, nil
	case len(reqs) == 1:
		d, err := s.Take(ctx, reqs[0])
		out[0] = d
		return err == nil && d.Allowed, err
	case !s.oneSlot(reqs):
		return ratekeeper.TakeAll(ctx, single{s}, reqs, out)
	}
	keys := make([]string, len(reqs))
	args := make([]any, 1, 1+7*len(reqs))
	args[0] = nowArg(reqs[0].Now)
	for i, req := range reqs {
		a := algoIndex(req.Limit.Algorithm)
		if a < 0 {
			return false, fmt.Errorf("redisstore: unknown algorithm %q", req.Limit.Algorithm)
		}
		keys[i] = s.Key(req.Key, req.Limit.Algorithm)
		if req.Limit.LogRejected {
			// A batch that fails takes nothing, penalties included (as in
			// the memory store); one that passes refuses nobody.
			req.Limit.LogRejected = false
		}
		lim := s.limitArgs(req)
		args = append(args, a+1, takeOp(req), req.N)
		args = append(args, lim[:]...)
	}
	v, err := s.run(ctx, s.batchScript, keys, args).Int64Slice()
	if err != nil {
		return false, fmt.Errorf("redisstore: take all (%d requests): %w", len(reqs), err)
	}
	if len(v) != 1+6*len(reqs) {
		return false, fmt.Errorf("redisstore: take all: script answered %d values, want %d", len(v), 1+6*len(reqs))
	}
	for i, req := range reqs {
		out[i] = decision(req, v[1+6*i:7+6*i])
	}
	return v[0] == 1, nil
}

// single is a Store seen without its TakeAll, for ratekeeper.TakeAll's
// take-and-refund.
type single struct{ s *Store }

func (x single) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	return x.s.Take(ctx, req)
}

func (x single) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	return x.s.Refund(ctx, req, d)
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
func takeOp(req ratekeeper.Request) string {
	if req.Reserve {
		switch req.Limit.Algorithm {
		case ratekeeper.TokenBucket:
			return "d"
		case ratekeeper.LeakyBucket:
			return "q"
		}
	}
	return "m"
}

// decision converts a script's six values.
func decision(req ratekeeper.Request, v []int64) ratekeeper.Decision {
	return algo.Decision(algo.Result{
		Allowed:    v[0] == 1,
		Limit:      int64(req.Limit.Capacity()),
		Remaining:  v[1],
		RetryAfter: v[2],
		ResetAfter: v[3],
		Delay:      v[4],
		At:         v[5],
	})
}
