package shared

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// halfDown is a remote whose items on one key fail alone while the call
// succeeds, as on a Cluster whose primary for that key does not answer.
type halfDown struct {
	*Model
	down *string
}

var errPrimaryDown = errors.New("primary down")

func (h halfDown) Add(ctx context.Context, items []Item) error {
	var up []Item
	for _, it := range items {
		if it.Key != *h.down {
			up = append(up, it)
		}
	}
	if err := h.Model.Add(ctx, up); err != nil {
		return err
	}
	k := 0
	for i := range items {
		if items[i].Key == *h.down {
			items[i].Err = errPrimaryDown
			continue
		}
		items[i] = up[k]
		k++
	}
	return nil
}

// A sync whose items fail alone keeps the failed keys' counts for the next
// sync and applies the others once; it reads the remote's clock from an
// item that was answered (the failed ones carry none: reading one set the
// clock estimate to the epoch).
func TestSyncItemsFailAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := NewModel()
		m.Latency = 2 * time.Millisecond
		// "a" sorts first whatever the order: both keys fail in turn.
		for _, down := range []string{"a", "b"} {
			failing := ""
			s := New(halfDown{m, &failing}, Sync, 100*time.Millisecond, WithoutLoop())
			l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
			take := func(k string) {
				t.Helper()
				if d, err := s.Take(ctx, ratekeeper.Request{Key: down + k, Limit: l, N: 1}); err != nil || !d.Allowed {
					t.Fatalf("take %s: %+v %v", k, d, err)
				}
			}
			take("a") // both keys' states loaded while all is up
			take("b")
			s.Flush()
			failing = down + down
			for range 3 {
				take("a")
				take("b")
				time.Sleep(100 * time.Millisecond)
				s.Flush()
				if off := time.Duration(s.offset.Load()) * time.Microsecond; off < -time.Second || off > time.Second {
					t.Fatalf("down %s: clock offset %v after a sync whose item failed", down, off)
				}
			}
			up := "a"
			if down == "a" {
				up = "b"
			}
			if got := m.State(down+up, l).Window.Count; got != 4 {
				t.Errorf("down %s: the answered key counts %d, want 4 (each sent once)", down, got)
			}
			if got := m.State(down+down, l).Window.Count; got != 1 {
				t.Errorf("down %s: the failed key counts %d in the remote, want 1 (from before)", down, got)
			}
			// Back: the failed key's counts all arrive.
			failing = ""
			s.Flush()
			if got := m.State(down+down, l).Window.Count; got != 4 {
				t.Errorf("down %s: the failed key counts %d once back, want 4 (nothing lost)", down, got)
			}
			s.Close()
		}
	})
}
