package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// The limit every algorithm gets in the over-admission test: 500 per hour,
// so that refill during the test adds less than one request (the test
// checks that no window boundary passed).
const (
	overLimit    = 500
	overProcs    = 3
	overRoutines = 16
	overAttempts = 40 // per goroutine: demand 3·16·40 = 1920 > 500
)

func overLimitFor(a ratekeeper.Algorithm) ratekeeper.Limit {
	return ratekeeper.Limit{Algorithm: a, Rate: overLimit, Period: time.Hour}
}

// TestOverAdmission runs overProcs OS processes (this test binary again),
// each with overRoutines goroutines, against one Redis, all on the same
// keys, and demands that exactly the limit was admitted in total for every
// algorithm.
func TestOverAdmission(t *testing.T) {
	if url := os.Getenv("RK_OVERADMIT_URL"); url != "" {
		overAdmitChild(t, url, os.Getenv("RK_OVERADMIT_PREFIX"))
		return
	}
	url := redistest.Server(t)
	prefix := fmt.Sprintf("over:%d:", time.Now().UnixNano())
	ctx := context.Background()
	client, err := redisstore.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	before := redisTime(t, client)

	var wg sync.WaitGroup
	outs := make([]string, overProcs)
	errs := make([]error, overProcs)
	for p := 0; p < overProcs; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOverAdmission$", "-test.count=1")
			cmd.Env = append(os.Environ(), "RK_OVERADMIT_URL="+url, "RK_OVERADMIT_PREFIX="+prefix)
			out, err := cmd.CombinedOutput()
			outs[p], errs[p] = string(out), err
		}()
	}
	wg.Wait()
	after := redisTime(t, client)
	if before.Truncate(time.Hour) != after.Truncate(time.Hour) {
		t.Skip("an hour boundary passed during the test; the window algorithms then rightly admit more")
	}
	total := map[ratekeeper.Algorithm]int{}
	for p := range outs {
		if errs[p] != nil {
			t.Fatalf("process %d: %v\n%s", p, errs[p], outs[p])
		}
		for _, line := range strings.Split(outs[p], "\n") {
			var name string
			var n int
			if _, err := fmt.Sscanf(line, "admitted %s %d", &name, &n); err == nil {
				total[ratekeeper.Algorithm(name)] += n
			}
		}
	}
	for _, a := range ratekeeper.Algorithms {
		t.Logf("%s: %d admitted of %d asked by %d processes × %d goroutines", a, total[a], overProcs*overRoutines*overAttempts, overProcs, overRoutines)
		if total[a] != overLimit {
			t.Errorf("%s: %d admitted in total, want exactly %d", a, total[a], overLimit)
		}
	}
}

func redisTime(t *testing.T, c redis.UniversalClient) time.Time {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// overAdmitChild is one process of TestOverAdmission: for each algorithm,
// overRoutines goroutines ask overAttempts times each; it prints how many
// were admitted.
func overAdmitChild(t *testing.T, url, prefix string) {
	s, err := redisstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, a := range ratekeeper.Algorithms {
		lim, err := ratekeeper.New(s, overLimitFor(a))
		if err != nil {
			t.Fatal(err)
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < overRoutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < overAttempts; i++ {
					d, err := lim.Allow(context.Background(), prefix+string(a))
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		fmt.Println("admitted", a, strconv.FormatInt(admitted.Load(), 10))
	}
}
