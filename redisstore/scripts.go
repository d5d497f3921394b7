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

// file is an embedded script file.
func file(name string) string {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return string(b)
}

// algoFiles names each algorithm's file, in algoIndex order.
var algoFiles = [5]string{"bucket", "bucket", "fixed_window", "sliding_log", "sliding_window"}

// function is the algorithm file name wrapped as the Lua function fn of one
// call (see scripts/prelude.lua).
func function(fn, name string) string {
	return "local function " + fn + "(key, op, n, now, rate, period, least, x7, x8, c0, c1, c2, c3)\n" +
		file(name+".lua") + "\nend\n"
}

// scriptSource is one algorithm's script: the prelude, the arguments of
// one call, and the algorithm's file as it is.
func scriptSource(name string) string {
	return file("prelude.lua") + file("single.lua") + file(name+".lua")
}

// scripts holds one script per algorithm, indexed by algoIndex.
type scripts [5]*redis.Script

func loadScripts() scripts {
	var s scripts
	for i, name := range algoFiles {
		s[i] = redis.NewScript(scriptSource(name))
	}
	return s
}

// batchSource is batch.lua after the algorithms' functions.
func batchSource() string { return wrapped("batch.lua") }

// manySource is many.lua after the algorithms' functions.
func manySource() string { return wrapped("many.lua") }

// wrapped is the prelude, each algorithm's function, the table algos of
// them in algoIndex order (1 to 5), and then the driver file name.
func wrapped(name string) string {
	var b strings.Builder
	b.WriteString(file("prelude.lua"))
	var fns [len(algoFiles)]string
	for i, f := range algoFiles {
		fns[i] = "algo_" + f
		if i == 0 || algoFiles[i-1] != f {
			b.WriteString(function(fns[i], f))
		}
	}
	fmt.Fprintf(&b, "local algos = {%s}\n", strings.Join(fns[:], ", "))
	b.WriteString(file(name))
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
