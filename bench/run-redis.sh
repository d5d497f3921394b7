#!/usr/bin/env bash
# The Redis benchmarks (bench/redis_bench_test.go): starts its own
# redis-server on a free loopback port, runs every implementation at 1, 16,
# 64 and 256 callers, writes the raw output to results/redis.txt and the
# benchstat summary (each implementation against redis_rate) to
# results/redis-benchstat.txt.
# Environment: COUNT (default 5), BENCHTIME (default 1s).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
if ! command -v redis-server >/dev/null 2>&1; then
  ../scripts/test-deps.sh
fi
port=""
for p in $(seq 16379 16479); do
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "run-redis: no free port in 16379..16479" >&2; exit 1; }
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
  --daemonize no --logfile "$dir/redis.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done
{
  echo "# $(date -u +%FT%TZ) $(redis-server --version | cut -d' ' -f1-3) on $(nproc) cores, shared with the benchmark client"
  RK_BENCH_REDIS="redis://127.0.0.1:$port/0" go test -run '^$' -bench '^BenchmarkRedis$' \
    -benchmem -benchtime="${BENCHTIME:-1s}" -count="${COUNT:-5}" -timeout 60m .
} | tee results/redis.txt
go tool -modfile=../tools/go.mod benchstat -col /impl results/redis.txt > results/redis-benchstat.txt
cat results/redis-benchstat.txt
