#!/usr/bin/env bash
# The memory part of make bench: ratekeeper's memory store side by side with
# golang.org/x/time/rate, the map+mutex pattern, sethvargo/go-limiter and
# ulule/limiter (bench/memory_test.go), in COUNT interleaved rounds (every
# round runs every contender, so a slow spell of a shared machine hits them
# all alike), then summarised with benchstat.
#
# Writes results/memory.txt (raw go test output, benchstat's input) and
# results/memory-benchstat.txt (the summary, also printed).
# Usage: bench/run-memory.sh   (env: COUNT=6 BENCHTIME=1s BENCH=regexp)
set -euo pipefail
cd "$(dirname "$0")"

count=${COUNT:-6}
benchtime=${BENCHTIME:-1s}
bench=${BENCH:-^BenchmarkMemory}
raw=results/memory.txt
summary=results/memory-benchstat.txt
benchstat=(go tool -modfile=../tools/go.mod benchstat)

# targets prints the issue's targets as ratios of medians over the rounds.
targets() {
  awk '
    /^Benchmark/ {
      name = $1; sub(/-[0-9]+$/, "", name)
      for (i = 3; i < NF; i += 2) { k = name SUBSEP $(i+1); n[k]++; v[k, n[k]] = $i }
    }
    function median(k,   m, i, j, t, a) {
      m = n[k]; if (!m) return 0
      for (i = 1; i <= m; i++) a[i] = v[k, i]
      for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
      return m % 2 ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2
    }
    function ratio(a, b, unit) { return median(b SUBSEP unit) ? median(a SUBSEP unit) / median(b SUBSEP unit) : 0 }
    END {
      print "(a target counts as met only if both the wall-time and the CPU-time ratio meet it)"
      p = "BenchmarkMemoryOneKey/mode="
      for (m = 1; m <= 2; m++) {
        mode = m == 1 ? "serial" : "parallel"
        r = ratio(p mode "/lib=ratekeeper", p mode "/lib=x_time_rate", "ns/op")
        c = ratio(p mode "/lib=ratekeeper", p mode "/lib=x_time_rate", "cpu-ns/op")
        printf "one key, %-8s ratekeeper time / x/time/rate time: %.2fx wall, %.2fx CPU per op (target <= 1.30x: %s)\n", mode, r, c, (r == 0 ? "not measured" : r <= 1.3 && c <= 1.3 ? "met" : "not met")
      }
      p = "BenchmarkMemoryManyKeys/lib="
      split("map_mutex sethvargo ulule", peers, " ")
      for (i = 1; i <= 3; i++) {
        r = ratio(p peers[i], p "ratekeeper", "ns/op")
        c = ratio(p peers[i], p "ratekeeper", "cpu-ns/op")
        want = peers[i] == "map_mutex" ? 2 : 1
        printf "1M keys, parallel: ratekeeper throughput / %s throughput: %.2fx wall, %.2fx CPU per op (target >= %.1fx: %s)\n", peers[i], r, c, want, (r == 0 ? "not measured" : r >= want && c >= want ? "met" : "not met")
      }
      split("token_bucket leaky_bucket fixed_window sliding_window sliding_log", algos, " ")
      for (i = 1; i <= 5; i++) {
        b = median("BenchmarkMemoryHeap/algo=" algos[i] "/lib=ratekeeper" SUBSEP "B/key")
        printf "heap per key, %-14s %6.1f B/key (%s)\n", algos[i] ":", b, (b == 0 ? "not measured" : algos[i] == "sliding_log" ? "reported, no target" : (b <= 100 ? "target <= 100: met" : "target <= 100: not met"))
      }
      split("map_mutex:token_bucket sethvargo:token_bucket ulule:fixed_window", ps, " ")
      for (i = 1; i <= 3; i++) {
        split(ps[i], kv, ":")
        printf "heap per key, peer %-10s %6.1f B/key (%s, for context)\n", kv[1] ":", median("BenchmarkMemoryHeap/algo=" kv[2] "/lib=" kv[1] SUBSEP "B/key"), kv[2]
      }
    }' "$1"
}

mkdir -p results
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go test -c -o "$tmp/memory.test" .
"${benchstat[@]}" -h >/dev/null 2>&1 || true # fetch and build benchstat before timing anything

{
  echo "# bench/run-memory.sh: $count interleaved rounds of -bench '$bench' -benchtime $benchtime"
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(go version) $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
} >"$raw"
for i in $(seq "$count"); do
  echo "round $i/$count" >&2
  (cd "$tmp" && ./memory.test -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" -test.count 1) | tee -a "$raw" | grep -E '^Benchmark' >&2
done

{
  echo "# go tool -modfile=tools/go.mod benchstat -col /lib bench/$raw (one table per benchmark and unit;"
  echo "# the first column, ratekeeper, is the base of every comparison)"
  "${benchstat[@]}" -filter '.name:/^Memory(OneKey|ManyKeys|Heap)$/' -col /lib "$raw"
  echo
  echo "# go tool -modfile=tools/go.mod benchstat -filter .name:MemoryAlgorithms bench/$raw"
  "${benchstat[@]}" -filter '.name:MemoryAlgorithms' "$raw"
  echo
  echo "# The targets of issue 2, as ratios of the medians above."
  targets "$raw"
} | tee "$summary"
