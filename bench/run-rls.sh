#!/usr/bin/env bash
# The decision service benchmarks: ratekeeper serve against Envoy's
# reference rate limit service (bench/rlsref, built from its Go module),
# both on the same local redis-server, and against gubernator (bench/gubernator,
# built from its Go module: one node, which keeps its counts in its own
# memory), driven over gRPC by bench/rlsload at 16, 64 and 256 concurrent
# callers with 1 and 10,000 keys (rlsload's lean client, HTTP/2 frames
# written directly, standing in for Envoy's C++ client; CLIENT=grpc for
# grpc-go's client). The services take turns at every
# configuration. Raw output: results/rls.txt; benchstat summaries:
# results/rls-benchstat.txt (fixed_window, ratekeeper against the
# reference), results/rls-gubernator.txt (token and leaky bucket,
# ratekeeper against gubernator) and results/rls-algorithms.txt (every
# algorithm of ratekeeper).
# Then, at 64 callers and one key, the CPU time each process spends per
# decision (the service's and redis-server's from /proc, the load
# generator's from bash's time, over 4 s; 3 alternating rounds, the
# generator's grpc-go client too): results/rls-cpu.txt.
# Environment: COUNT (rounds, default 3), DURATION (per configuration,
# default 2s), CALLERS (default 16,64,256), KEYS (default 1,10000), CLIENT
# (lean or grpc, default lean), CPU (0: skip the CPU measurements), OUT
# (the results files' prefix, default rls).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
if ! command -v redis-server >/dev/null 2>&1; then
  ../scripts/test-deps.sh
fi
COUNT=${COUNT:-3}
DURATION=${DURATION:-2s}
CALLERS=${CALLERS:-16,64,256}
KEYS=${KEYS:-1,10000}
CLIENT=${CLIENT:-lean}
CPU=${CPU:-1}
OUT=${OUT:-rls} # the results files: results/$OUT.txt, results/$OUT-benchstat.txt, ...
ALGORITHMS=fixed_window,token_bucket,leaky_bucket,sliding_window,sliding_log

used=" "
freeport() {
  for p in $(seq "$1" $(( $1 + 200 ))); do
    case "$used" in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then used="$used$p "; echo "$p"; return; fi
  done
  echo "run-rls: no free port from $1" >&2; exit 1
}
waitport() {
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "run-rls: nothing listens on port $1 after 30s" >&2; exit 1
}

dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

echo "building ratekeeper, the reference service, gubernator and the load generator" >&2
(cd .. && go build -o "$dir/ratekeeper" ./cmd/ratekeeper)
go build -o "$dir/rlsref" ./rlsref
go build -o "$dir/gubernator" ./gubernator
go build -o "$dir/rlsload" ./rlsload

redis_port=$(freeport 16500)
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
  --daemonize no --logfile "$dir/redis.log" &
pids+=($!); redis_pid=$!
waitport "$redis_port"

rk_grpc=$(freeport 18081); rk_admin=$(freeport 19090)
"$dir/ratekeeper" serve --config rlsconf/ratekeeper.yaml --grpc-listen "127.0.0.1:$rk_grpc" \
  --http-listen - --admin-listen "127.0.0.1:$rk_admin" --log-level warn \
  --store "redis://127.0.0.1:$redis_port/0" --store-timeout 1s --store-on-error deny 2>"$dir/ratekeeper.log" &
pids+=($!); rk_pid=$!

mkdir -p "$dir/runtime/ratelimit/config"
cp rlsconf/reference.yaml "$dir/runtime/ratelimit/config/bench.yaml"
ref_grpc=$(freeport 28081); ref_http=$(freeport 28080); ref_debug=$(freeport 26070)
# Stats off (a null sink): the reference's cheapest setting. USE_STATSD=false
# alone would log every timer sample at each flush.
env RUNTIME_ROOT="$dir/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
  DISABLE_STATS=true USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" \
  HOST=127.0.0.1 PORT="$ref_http" GRPC_HOST=127.0.0.1 GRPC_PORT="$ref_grpc" \
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$ref_debug" "$dir/rlsref" 2>"$dir/reference.log" &
pids+=($!); ref_pid=$!
gub_grpc=$(freeport 29081); gub_http=$(freeport 29180)
"$dir/gubernator" -grpc-listen "127.0.0.1:$gub_grpc" -http-listen "127.0.0.1:$gub_http" 2>"$dir/gubernator.log" &
pids+=($!); gub_pid=$!
waitport "$rk_grpc"
waitport "$ref_grpc"
waitport "$gub_grpc"

# The machine is shared and its load changes by the minute: the two
# services alternate at every configuration, so that each ratio compares
# runs made seconds apart.
load() { "$dir/rlsload" -client "$CLIENT" -duration "$DURATION" -warmup 300ms "$@"; }
{
  echo "# $(date -u +%FT%TZ) $(redis-server --version | cut -d' ' -f1-3), $(nproc) cores shared by redis, the services and the load generator (and by other engineers' builds); load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# load generator: bench/rlsload -client $CLIENT"
  echo "# reference: github.com/envoyproxy/ratelimit $(go list -m -f '{{.Version}}' github.com/envoyproxy/ratelimit), default settings (REDIS_POOL_SIZE 10, no implicit pipelining), stats off"
  echo "# gubernator: github.com/gubernator-io/gubernator/v2 $(go list -m -f '{{.Version}}' github.com/gubernator-io/gubernator/v2), one node, counts in its memory (no Redis), default settings"
  for round in $(seq "$COUNT"); do
    echo "round $round of $COUNT" >&2
    for k in ${KEYS//,/ }; do
      for c in ${CALLERS//,/ }; do
        load -keys "$k" -callers "$c" -impl reference -addr "127.0.0.1:$ref_grpc" -algorithms fixed_window
        load -keys "$k" -callers "$c" -impl ratekeeper -addr "127.0.0.1:$rk_grpc" -algorithms "$ALGORITHMS"
        load -keys "$k" -callers "$c" -impl gubernator -addr "127.0.0.1:$gub_grpc" -api gubernator -algorithms token_bucket,leaky_bucket
      done
    done
  done
} | tee "results/$OUT.txt"

# CPU per decision of each process at 64 callers, one key, over one 4 s
# configuration.
cpu() { # name service-pid client rlsload-args...
  local name=$1 spid=$2 client=$3 tk s0 s1 r0 r1 n g
  shift 3
  tk=$(getconf CLK_TCK)
  s0=$(awk '{print $14+$15}' "/proc/$spid/stat"); r0=$(awk '{print $14+$15}' "/proc/$redis_pid/stat")
  g=$( { TIMEFORMAT='%U %S'; time "$dir/rlsload" -client "$client" -duration 4s -warmup 1ms -keys 1 -callers 64 "$@" >"$dir/cpu.out" 2>"$dir/cpu.err"; } 2>&1 )
  s1=$(awk '{print $14+$15}' "/proc/$spid/stat"); r1=$(awk '{print $14+$15}' "/proc/$redis_pid/stat")
  n=$(awk '/^Benchmark/ {print $2}' "$dir/cpu.out")
  if [ -s "$dir/cpu.err" ]; then cat "$dir/cpu.err" >&2; fi
  awk -v name="$name" -v client="$client" -v n="${n:-0}" -v tk="$tk" -v s=$((s1 - s0)) -v r=$((r1 - r0)) -v g="$g" 'BEGIN {
    split(g, a, " "); if (n == 0) exit
    printf "cpu %-24s client=%-4s %7.0f decisions/s  service %5.1f us  generator %5.1f us  redis %5.1f us\n",
      name, client, n / 4, s / tk * 1e6 / n, (a[1] + a[2]) * 1e6 / n, r / tk * 1e6 / n }'
}
if [ "$CPU" != 0 ]; then
  {
    echo "# $(date -u +%FT%TZ) CPU time per decision at 64 callers, one key, 4 s each, 3 alternating rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
    for round in 1 2 3; do
      echo "cpu round $round of 3" >&2
      cpu reference/fixed_window "$ref_pid" lean -addr "127.0.0.1:$ref_grpc" -algorithms fixed_window
      cpu ratekeeper/fixed_window "$rk_pid" lean -addr "127.0.0.1:$rk_grpc" -algorithms fixed_window
      cpu ratekeeper/token_bucket "$rk_pid" lean -addr "127.0.0.1:$rk_grpc" -algorithms token_bucket
      cpu gubernator/token_bucket "$gub_pid" lean -addr "127.0.0.1:$gub_grpc" -api gubernator -algorithms token_bucket
      cpu reference/fixed_window "$ref_pid" grpc -addr "127.0.0.1:$ref_grpc" -algorithms fixed_window
      cpu ratekeeper/fixed_window "$rk_pid" grpc -addr "127.0.0.1:$rk_grpc" -algorithms fixed_window
    done
  } | tee "results/$OUT-cpu.txt"
fi

# Decisions the store did not make (timeouts, errors) would flatter the
# figures: there must be none.
fallbacks=$(curl -s "http://127.0.0.1:$rk_admin/metrics" | awk '/^ratekeeper_store_fallback_errors_total/ {print $2}')
echo "ratekeeper store errors during the run: ${fallbacks:-0}" | tee -a "results/$OUT.txt"
if [ -s "$dir/reference.log" ]; then echo "reference log:"; tail -5 "$dir/reference.log"; fi
if [ -s "$dir/gubernator.log" ]; then echo "gubernator log:"; tail -5 "$dir/gubernator.log"; fi

go tool -modfile=../tools/go.mod benchstat -filter '/alg:fixed_window' -col /impl "results/$OUT.txt" > "results/$OUT-benchstat.txt"
go tool -modfile=../tools/go.mod benchstat -filter '(/alg:token_bucket OR /alg:leaky_bucket) -/impl:reference' -col /impl "results/$OUT.txt" > "results/$OUT-gubernator.txt"
go tool -modfile=../tools/go.mod benchstat -filter '/impl:ratekeeper' -col /alg "results/$OUT.txt" > "results/$OUT-algorithms.txt"
cat "results/$OUT-benchstat.txt" "results/$OUT-gubernator.txt" "results/$OUT-algorithms.txt"
