package topfleet

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/topk"
)

// Top is the fleet's heaviest keys of one rule and kind over a span.
type Top struct {
	Rule string
	Kind topk.Kind
	// Top's Bound is the sum of the instances' bounds: no entry's error
	// is above it.
	topk.Top
	// Instances counts the summaries merged.
	Instances int
}

// Read returns, for each rule and each kind, the n heaviest keys over the
// span named span of every instance that published within the TTL. It
// takes two pipelines whatever the number of rules.
func (f *Fleet) Read(ctx context.Context, rules []string, span string, n int) ([]Top, error) {
	if !knownSpan(span) {
		return nil, errors.New("unknown span " + strconv.Quote(span))
	}
	ids, err := f.live(ctx, rules)
	if err != nil {
		return nil, err
	}
	// Each record is read up to one byte past maxBytes (GETRANGE), so a
	// huge value another writer left is skipped without being read whole.
	pipe := f.client.Pipeline()
	gets := make([][]*redis.StringCmd, len(rules))
	for i, rule := range rules {
		for _, id := range ids[i] {
			gets[i] = append(gets[i], pipe.GetRange(ctx, f.recordKey(rule, id, span), 0, int64(f.c.maxBytes)))
		}
	}
	if pipe.Len() > 0 {
		var rerr redis.Error
		if _, err := pipe.Exec(ctx); err != nil && !errors.As(err, &rerr) {
			return nil, err // a reply's error (WRONGTYPE) skips that record alone
		}
	}
	var out []Top
	for i, rule := range rules {
		var vals []any
		for _, g := range gets[i] {
			if v, err := g.Result(); err == nil && v != "" { // "": expired since
				vals = append(vals, v)
			}
		}
		out = append(out, f.merge(rule, span, n, f.records(rule, vals))...)
	}
	return out, nil
}

// live lists, per rule, the instances that published within the TTL, the
// most recent first, at most maxInstances.
func (f *Fleet) live(ctx context.Context, rules []string) ([][]string, error) {
	since := f.c.clock.Now().Add(-f.c.ttl).UnixMilli()
	pipe := f.client.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(rules))
	for i, rule := range rules {
		cmds[i] = pipe.ZRevRangeByScore(ctx, f.index(rule), &redis.ZRangeBy{
			Max: "+inf", Min: strconv.FormatInt(since, 10), Count: int64(f.c.maxInstances),
		})
	}
	if len(rules) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	ids := make([][]string, len(rules))
	for i, c := range cmds {
		ids[i] = c.Val()
	}
	return ids, nil
}

// records decodes the values an MGET of rule's records returned; those
// that expired meanwhile are nil. A record that does not decode, or that
// was published before the TTL, is skipped; the first is counted.
func (f *Fleet) records(rule string, vals []any) []record {
	since := f.c.clock.Now().Add(-f.c.ttl).UnixMilli()
	var out []record
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		r, err := decode([]byte(s), rule, f.c.maxBytes, f.c.maxEntry)
		if err != nil {
			f.skipped.Add(1)
			f.c.onError("record")
			f.c.logger.Warn("top: a fleet record is skipped", "rule", rule, "err", err)
			continue
		}
		if r.At >= since {
			out = append(out, r)
		}
	}
	return out
}

// merge combines the records' summaries of each kind over span.
func (f *Fleet) merge(rule, span string, n int, rs []record) []Top {
	var out []Top
	for _, kind := range kinds() {
		t := Top{Rule: rule, Kind: kind}
		var parts []topk.Summary
		for _, r := range rs {
			for _, p := range r.Tops {
				if p.Kind == kind.String() && p.Span == span {
					parts = append(parts, p.Summary)
					t.Total += p.Total
					t.Bound += p.Bound
				}
			}
		}
		t.Instances = len(parts)
		t.Entries, t.Floor = topk.Merge(max(n, 0), parts...)
		out = append(out, t)
	}
	return out
}
