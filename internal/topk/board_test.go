package topk

import (
	"sync"
	"testing"
	"time"
)

func TestBoard(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b := NewBoard(8)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				b.Add(now, "api", Refused, "heavy", 1)
				if i%10 == g {
					b.Add(now, "api", Refused, "light", 1)
				}
				b.Add(now, "login", Near, "x", 1)
			}
		})
	}
	wg.Wait()
	top, ok := b.Top(now.Add(30*time.Second), "api", Refused, "1m", 1)
	if !ok || len(top.Entries) != 1 || top.Entries[0] != (Entry{Key: "heavy", Count: 4000}) || top.Total != 4400 || top.Floor != 400 {
		t.Fatalf("api's top refused over 1m: %+v, %v; want heavy 4000 of 4400, floor 400", top, ok)
	}
	if top, _ := b.Top(now.Add(30*time.Minute), "api", Refused, "1m", 5); len(top.Entries) != 0 {
		t.Fatalf("30 min later over 1m: %+v; want nothing", top)
	}
	if top, _ := b.Top(now.Add(30*time.Minute), "api", Refused, "1h", 5); top.Total != 4400 {
		t.Fatalf("30 min later over 1h: %+v; want all 4400", top)
	}
	if top, _ := b.Top(now, "api", Near, "1m", 5); len(top.Entries) != 0 {
		t.Fatalf("api's near: %+v; want nothing (counted under login)", top)
	}
	if _, ok := b.Top(now, "api", Refused, "5m", 5); ok {
		t.Fatal("a span the board does not keep answered")
	}
	b.Forget(map[string]bool{"login": true})
	if rules := b.Rules(); len(rules) != 1 || rules[0] != "login" {
		t.Fatalf("after Forget: %v; want login alone", rules)
	}
}
