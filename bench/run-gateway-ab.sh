#!/usr/bin/env bash
# The gateway before and after a change: two builds of ratekeeper, side by
# side in one run, on loopback only. For each config (the fast path's
# one-rule.yaml, net/http's one-rule-nethttp.yaml, fifty-rules.yaml) and
# each build, wrk at full speed against the same upstream; rounds alternate
# the builds so that machine noise spreads over both.
#   bench/run-gateway-ab.sh BASE [HEAD]   (git revisions; HEAD by default)
# Env: ROUNDS (5), DURATION (5s), CONNS (64), THREADS (2); TRACE_HEAD=1
# runs HEAD's gateways with traces on (OTEL_TRACES_EXPORTER=otlp over
# http/protobuf) to a sink that answers every export 200 and drops it;
# OUT names the output (gateway-ab).
# Output: bench/results/$OUT.txt, with the medians and each config's
# ratio HEAD / BASE of requests/s and of CPU per request.
# Noise, one build against itself: within 2% at ROUNDS=15 DURATION=5s with
# nothing else running; 0.895x on net/http at 5 rounds of 3 s
# (results/gateway-aa.txt).
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh
[ $# -ge 1 ] || { echo "usage: bench/run-gateway-ab.sh BASE [HEAD]" >&2; exit 2; }
BASE=$1 HEAD=${2:-HEAD}
ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-5s} CONNS=${CONNS:-64} THREADS=${THREADS:-2}
command -v wrk >/dev/null 2>&1 || {
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends wrk >/dev/null
}

tmp=$(mktemp -d)
pids=()
cleanup() {
  local i # the gateways first, then the sink and the upstream
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for b in base head; do git -C .. worktree remove --force "$tmp/src-$b" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# build NAME REV builds ratekeeper at REV into $tmp/NAME.
build() {
  git -C .. worktree add -q --detach "$tmp/src-$1" "$2"
  (cd "$tmp/src-$1" && go build -o "$tmp/$1" ./cmd/ratekeeper)
}
build base "$BASE"
build head "$HEAD"
go build -o "$tmp/upstream" ./gateway/upstream
"$tmp/upstream" -listen 127.0.0.1:18081 & pids+=($!)
head_env=()
if [ "${TRACE_HEAD:-}" = 1 ]; then
  # The OTLP sink: another upstream, whose 200 text/plain the exporter
  # takes as a full success.
  "$tmp/upstream" -listen 127.0.0.1:18091 & pids+=($!)
  head_env=(OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:18091)
fi

declare -A port pid
configs=(one-rule one-rule-nethttp fifty-rules)
p=18300
for c in "${configs[@]}"; do
  for b in base head; do
    p=$((p + 2))
    envs=(); [ "$b" = head ] && envs=("${head_env[@]}")
    env "${envs[@]}" "$tmp/$b" proxy --config "gateway/$c.yaml" --listen "127.0.0.1:$p" --admin-listen "127.0.0.1:$((p + 1))" --log-level warn & pids+=($!)
    port[$c-$b]=$p pid[$c-$b]=$!
  done
done
for k in "${!port[@]}"; do
  for _ in $(seq 100); do
    curl -fs -o /dev/null "http://127.0.0.1:${port[$k]}/v1/items/7" && break
    sleep 0.1
  done
  curl -fs -o /dev/null "http://127.0.0.1:${port[$k]}/v1/items/7" || { echo "run-gateway-ab: $k does not answer" >&2; exit 1; }
done

out=results/${OUT:-gateway-ab}.txt
hz=$(getconf CLK_TCK)
{
  echo "# gateway A/B $(date -u +%FT%TZ), $(nproc) cores, base $(git -C .. rev-parse --short "$BASE"), head $(git -C .. rev-parse --short "$HEAD")${TRACE_HEAD:+ traced}, wrk -t$THREADS -c$CONNS -d$DURATION, $ROUNDS rounds"
  echo "# round config build requests/s cpu_us_per_request"
} > "$out"
for r in $(seq "$ROUNDS"); do
  for c in "${configs[@]}"; do
    order="base head"; [ $((r % 2)) -eq 0 ] && order="head base"
    for b in $order; do
      t0=$(ticks "${pid[$c-$b]}")
      res=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" -H 'X-User-ID: alice' "http://127.0.0.1:${port[$c-$b]}/v1/items/7")
      t1=$(ticks "${pid[$c-$b]}")
      rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$res")
      n=$(awk '/requests in/ {print $1}' <<<"$res")
      cpu=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')
      echo "$r $c $b $rps $cpu" | tee -a "$out"
    done
  done
done

awk '
  /^[0-9]/ { rps[$2 " " $3] = rps[$2 " " $3] " " $4; cpu[$2 " " $3] = cpu[$2 " " $3] " " $5; seen[$2] = 1 }
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    printf "\n%-18s %12s %12s %10s %10s %10s %10s\n", "median", "base req/s", "head req/s", "ratio", "base µs", "head µs", "ratio"
    for (c in seen) {
      rb = median(rps[c " base"]); rh = median(rps[c " head"]); cb = median(cpu[c " base"]); ch = median(cpu[c " head"])
      printf "%-18s %12.0f %12.0f %9.3fx %10.1f %10.1f %9.3fx\n", c, rb, rh, rh / rb, cb, ch, ch / cb
    }
  }' "$out" | tee -a "$out"
