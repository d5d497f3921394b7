package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// reloadOnFailure makes a Cluster client read the cluster's slots again
// when a command fails other than by Redis's own reply (a primary that
// died, a timeout). Left alone, go-redis keeps sending a dead primary's
// slots to it until its periodic reload (ClusterStateReloadInterval, 10 s
// by default), long after a replica has taken over. The reloads are
// coalesced (one at a time, 200 ms apart), so a burst of failures costs one
// CLUSTER SLOTS.
type reloadOnFailure struct{ c *redis.ClusterClient }

// watchCluster adds the hook to client if it is a Cluster's.
func watchCluster(client redis.UniversalClient) {
	if c, ok := client.(*redis.ClusterClient); ok {
		c.AddHook(reloadOnFailure{c})
	}
}

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(err)
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			for _, c := range cmds {
				if h.check(c.Err()) {
					break
				}
			}
		}
		h.check(err)
		return err
	}
}

// check asks for a reload if err is a failure to reach the node, and says
// whether it did.
func (h reloadOnFailure) check(err error) bool {
	var reply redis.Error
	if err == nil || errors.As(err, &reply) {
		return false // Redis answered, if only to refuse
	}
	h.c.ReloadState(context.Background())
	return true
}
