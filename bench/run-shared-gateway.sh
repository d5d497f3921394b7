#!/usr/bin/env bash
# Shared limits at local cost, through the gateway: three `ratekeeper proxy`
# processes in front of one upstream, each driven by its own wrk (-t1, CONNS
# connections), with one global limit (above what wrk sends, so every
# request is decided and proxied) kept
#   memory   in each process's own memory (three separate limits: the floor)
#   exact    in one Redis, every decision a round trip
#   lease    in one Redis, decided locally from leased quota (T = 100ms)
# The modes take turns, ROUNDS times; each line sums the three wrk runs.
# The target (issue #15): lease at least 0.9x memory.
# Env: ROUNDS (3), DURATION (10s), CONNS (21 per process).
# Output: bench/results/shared-gateway.txt.
set -euo pipefail
cd "$(dirname "$0")"
ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-10s} CONNS=${CONNS:-21}
command -v wrk >/dev/null 2>&1 || { echo "run-shared-gateway: needs wrk (apt-get install wrk)" >&2; exit 1; }
mkdir -p results
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
. ./lib.sh
rport=$(freeport 16800)
start_redis "$rport" "$tmp"; pids+=("$redis_pid")
(cd .. && go build -o "$tmp/ratekeeper" ./cmd/ratekeeper)
go build -o "$tmp/upstream" ./gateway/upstream
"$tmp/upstream" -listen 127.0.0.1:18081 & pids+=($!)
for f in gateway/shared/*.yaml; do
  sed "s#@REDIS@#$rport#g" "$f" > "$tmp/$(basename "$f")"
  "$tmp/ratekeeper" proxy --config "$tmp/$(basename "$f")" --log-level warn & pids+=($!)
done
declare -A base=([memory]=18100 [exact]=18110 [lease]=18120)
for p in 18081 18101 18102 18103 18111 18112 18113 18121 18122 18123; do
  up=""
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && { up=1; break; }; sleep 0.05; done
  [ -n "$up" ] || { echo "run-shared-gateway: nothing listens on $p" >&2; exit 1; }
done
{
  echo "# shared gateway benchmark $(date -u +%FT%TZ), $(nproc) cores, 3 proxies x wrk -t1 -c$CONNS -d$DURATION, $ROUNDS rounds"
  for r in $(seq "$ROUNDS"); do
    for m in memory exact lease; do
      b=${base[$m]}
      wrks=()
      for i in 1 2 3; do
        wrk -t1 -c"$CONNS" -d"$DURATION" "http://127.0.0.1:$((b + i))/v1/items/7" > "$tmp/wrk-$i.txt" & wrks+=($!)
      done
      wait "${wrks[@]}"
      total=0
      non2xx=0
      for i in 1 2 3; do
        rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk-$i.txt")
        total=$(awk -v a="$total" -v b="$rps" 'BEGIN {printf "%.0f", a + b}')
        n=$(awk '/Non-2xx/ {print $5}' "$tmp/wrk-$i.txt"); non2xx=$((non2xx + ${n:-0}))
      done
      echo "$r $m $total non2xx=$non2xx"
    done
  done
} | tee "$tmp/out.txt"
awk '
  function median(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return a[int((n + 1) / 2)] }
  /^[0-9]/ { v[$2] = v[$2] " " $3 }
  END {
    printf "\nmedian requests/s: memory %d, exact %d, lease %d\n", median(v["memory"]), median(v["exact"]), median(v["lease"])
    printf "vs memory: exact %.2fx, lease %.2fx\n", median(v["exact"]) / median(v["memory"]), median(v["lease"]) / median(v["memory"])
  }' "$tmp/out.txt" | tee -a "$tmp/out.txt"
cp "$tmp/out.txt" results/shared-gateway.txt
