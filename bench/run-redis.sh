#!/usr/bin/env bash
# The Redis benchmarks (bench/redis_bench_test.go): starts its own
# redis-server on a free loopback port, runs every implementation at 1, 16,
# 64 and 256 callers, writes the raw output to results/redis.txt and the
# benchstat summary (each implementation against redis_rate) to
# results/redis-benchstat.txt. Then, if valgrind is installed, it runs
# BenchmarkRedisServerCPU once more against a redis-server under callgrind,
# which counts the instructions the server runs per script call (server-Ir/op:
# exact, whatever the machine's load), and BenchmarkRedis at 64 callers, where
# ratekeeper runs many decisions per script (server-Ir/op per decision), into
# results/redis-callgrind.txt.
# Environment: COUNT (default 5), BENCHTIME (default 1s), CALLGRIND=0 to skip.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
. ./lib.sh
dir=$(mktemp -d)
redis_pid=""
cgpid=""
trap 'kill $redis_pid $cgpid 2>/dev/null; wait $redis_pid $cgpid 2>/dev/null; rm -rf "$dir"' EXIT
port=$(freeport 16379)
start_redis "$port" "$dir"
# One binary, run COUNT times: each round measures every implementation side
# by side, so that the machine's load drifts over all of them alike.
go test -c -o "$dir/bench.test" .
{
  echo "# $(date -u +%FT%TZ) $(redis-server --version | cut -d' ' -f1-3) on $(nproc) cores, shared with the benchmark client"
  for _ in $(seq "${COUNT:-5}"); do
    RK_BENCH_REDIS="redis://127.0.0.1:$port/0" "$dir/bench.test" -test.run '^$' \
      -test.bench '^BenchmarkRedis(ServerCPU)?$' -test.benchmem -test.benchtime="${BENCHTIME:-1s}" \
      -test.count=1 -test.timeout 60m
  done
} | tee results/redis.txt
go tool -modfile=../tools/go.mod benchstat -col /impl results/redis.txt > results/redis-benchstat.txt
cat results/redis-benchstat.txt

if [ "${CALLGRIND:-1}" != 0 ] && command -v valgrind >/dev/null 2>&1; then
  cgport=$(freeport $((port + 1)))
  valgrind --tool=callgrind --toggle-collect=evalShaCommand --callgrind-out-file="$dir/cg.out" \
    redis-server --port "$cgport" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    --daemonize no --logfile "$dir/redis-cg.log" 2>"$dir/valgrind.log" &
  cgpid=$!
  for _ in $(seq 300); do
    redis-cli -p "$cgport" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  {
    echo "# $(date -u +%FT%TZ) $(redis-server --version | cut -d' ' -f1-3) under valgrind --tool=callgrind: server-Ir/op are the instructions in EVALSHA per decision"
    RK_BENCH_REDIS="redis://127.0.0.1:$cgport/0" RK_BENCH_CALLGRIND="$cgpid:$dir/cg.out" "$dir/bench.test" -test.run '^$' \
      -test.bench '^BenchmarkRedisServerCPU$' -test.benchtime=2000x -test.count=1 -test.timeout 60m
    RK_BENCH_REDIS="redis://127.0.0.1:$cgport/0" RK_BENCH_CALLGRIND="$cgpid:$dir/cg.out" "$dir/bench.test" -test.run '^$' \
      -test.bench '^BenchmarkRedis$/impl=(redis_rate|ulule|rk-[a-z_]+)$/callers=64$' -test.benchtime=20000x -test.count=1 -test.timeout 60m
  } | tee results/redis-callgrind.txt
fi
