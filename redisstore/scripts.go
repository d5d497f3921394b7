package redisstore

import (
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// scriptSource is one algorithm's script: the prelude, then its own file.
func scriptSource(name string) string {
	prelude, err := scriptFS.ReadFile("scripts/prelude.lua")
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	body, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return string(prelude) + "\n" + string(body)
}

// scripts holds one script per algorithm, indexed by algoIndex.
type scripts [5]*redis.Script

func loadScripts() scripts {
	return scripts{
		redis.NewScript(scriptSource("bucket")),
		redis.NewScript(scriptSource("bucket")),
		redis.NewScript(scriptSource("fixed_window")),
		redis.NewScript(scriptSource("sliding_log")),
		redis.NewScript(scriptSource("sliding_window")),
	}
}

// batchSource is batch.lua after each algorithm's script wrapped as a
// function of (KEYS, ARGV), in algoIndex order.
func batchSource() string { return wrapped("batch.lua") }

// manySource is many.lua after each algorithm's script wrapped as a
// function of (KEYS, ARGV), in algoIndex order.
func manySource() string { return wrapped("many.lua") }

// wrapped is the script file name after each algorithm's script wrapped as
// a function of (KEYS, ARGV): algos[1..5], in algoIndex order.
func wrapped(name string) string {
	var b strings.Builder
	b.WriteString("local algos = {}\n")
	for i, name := range []string{"bucket", "bucket", "fixed_window", "sliding_log", "sliding_window"} {
		if i == 1 {
			b.WriteString("algos[2] = algos[1]\n")
			continue
		}
		fmt.Fprintf(&b, "algos[%d] = function(KEYS, ARGV)\n%s\nend\n", i+1, scriptSource(name))
	}
	body, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	b.Write(body)
	return b.String()
}

// algoIndex numbers the algorithms for scripts and key suffixes; -1 for an
// unknown one.
func algoIndex(a ratekeeper.Algorithm) int {
	switch a {
	case ratekeeper.TokenBucket:
		return 0
	case ratekeeper.LeakyBucket:
		return 1
	case ratekeeper.FixedWindow:
		return 2
	case ratekeeper.SlidingLog:
		return 3
	case ratekeeper.SlidingWindow:
		return 4
	}
	return -1
}

// suffixes end each algorithm's keys, so that one client key used with
// several algorithms keeps one state per algorithm. The sliding log's is
// ":ls" since its state became a string: the sorted sets that earlier
// builds kept under ":sl" are left alone to expire, rather than failing
// every decision with WRONGTYPE after an upgrade.
var suffixes = [5]string{":tb", ":lb", ":fw", ":ls", ":sw"}
