#!/usr/bin/env bash
# The gateway benchmark: wrk against the same upstream, side by side in one
# run, on loopback only:
#   direct     wrk -> upstream
#   rk-1       wrk -> ratekeeper proxy (1 rule, memory store) -> upstream
#   rk-50      wrk -> ratekeeper proxy (50 rules, 3 match)    -> upstream
#   rk-net     rk-1 with net/http serving every client (client_transport: standard)
#   rk-std     rk-1 with Go's http.Transport to the upstream (upstream_transport:
#              standard, which also means net/http serves every client)
#   go-rp      wrk -> plain httputil.ReverseProxy, no limits  -> upstream
#   go-floor   wrk -> the least a Go proxy can do (gateway/floorproxy: no
#              net/http, no limits, bytes copied) -> upstream
#   nginx      wrk -> nginx with limit_req at the same limit  -> upstream
# Each contender gets wrk at full speed (closed loop: throughput, and the
# latency of a saturated queue) and gateway/load at a fixed RATE over CONNS
# connections (open loop: the latency each contender adds below saturation).
# Rounds alternate the contenders so that machine noise spreads over all.
# Then the middleware's decision alone (go test -bench, benchstat).
# Env: ROUNDS (3), DURATION (10s), CONNS (64), THREADS (2), RATE (2000),
# COUNT (6).
# Output: bench/results/gateway.txt and bench/results/gateway-go.txt.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh
ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-10s} CONNS=${CONNS:-64} THREADS=${THREADS:-2} RATE=${RATE:-2000} COUNT=${COUNT:-6}

need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "run-gateway: installing ${need[*]}" >&2
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

mkdir -p results
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

(cd .. && go build -o "$tmp/ratekeeper" ./cmd/ratekeeper)
go build -o "$tmp/upstream" ./gateway/upstream
go build -o "$tmp/plainproxy" ./gateway/plainproxy
go build -o "$tmp/floorproxy" ./gateway/floorproxy
go build -o "$tmp/load" ./gateway/load
sed "s#@DIR@#$tmp#g" gateway/nginx.conf.in > "$tmp/nginx.conf"

"$tmp/upstream" -listen 127.0.0.1:18081 & pids+=($!); pid_direct=$!
"$tmp/ratekeeper" proxy --config gateway/one-rule.yaml --log-level warn & pids+=($!); pid_rk1=$!
"$tmp/ratekeeper" proxy --config gateway/fifty-rules.yaml --log-level warn & pids+=($!); pid_rk50=$!
"$tmp/ratekeeper" proxy --config gateway/one-rule-nethttp.yaml --log-level warn & pids+=($!); pid_rknet=$!
"$tmp/ratekeeper" proxy --config gateway/one-rule-standard.yaml --log-level warn & pids+=($!); pid_rkstd=$!
"$tmp/plainproxy" -listen 127.0.0.1:18085 & pids+=($!); pid_gorp=$!
"$tmp/floorproxy" -listen 127.0.0.1:18087 & pids+=($!); pid_floor=$!
"$NGINX" -p "$tmp" -c "$tmp/nginx.conf" & pids+=($!); pid_nginx=$!

declare -A port=([direct]=18081 [rk-1]=18082 [rk-50]=18083 [rk-net]=18088 [rk-std]=18086 [go-rp]=18085 [go-floor]=18087 [nginx]=18084)
order=(direct rk-1 rk-50 rk-net rk-std go-rp go-floor nginx)
for name in "${order[@]}"; do
  for _ in $(seq 100); do
    curl -fs -o /dev/null "http://127.0.0.1:${port[$name]}/v1/items/7" && break
    sleep 0.1
  done
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-User-ID: alice' "http://127.0.0.1:${port[$name]}/v1/items/7")
  [ "$code" = 200 ] || { echo "run-gateway: $name answers $code" >&2; exit 1; }
done

# The processes whose CPU time (lib.sh's ticks) is a contender's (nginx:
# master and workers). direct's is the upstream's own.
declare -A pid=([direct]=$pid_direct [rk-1]=$pid_rk1 [rk-50]=$pid_rk50 [rk-net]=$pid_rknet [rk-std]=$pid_rkstd [go-rp]=$pid_gorp [go-floor]=$pid_floor [nginx]=$pid_nginx)
hz=$(getconf CLK_TCK)

out=results/gateway.txt
{
  echo "# gateway benchmark $(date -u +%FT%TZ), $(nproc) cores, wrk -t$THREADS -c$CONNS -d$DURATION, $ROUNDS rounds"
  echo "# round contender wrk_requests/s wrk_p50_ms wrk_p99_ms | load at $RATE/s over $CONNS conns: p50_ms p99_ms | contender CPU µs per request under wrk"
} > "$out"
for r in $(seq "$ROUNDS"); do
  for name in "${order[@]}"; do
    t0=$(ticks "${pid[$name]}")
    res=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -H 'X-User-ID: alice' "http://127.0.0.1:${port[$name]}/v1/items/7")
    t1=$(ticks "${pid[$name]}")
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$res")
    nreq=$(awk '/requests in/ {print $1}' <<<"$res")
    cpu=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="$nreq" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')
    p50=$(to_ms "$(awk '$1=="50%" {print $2}' <<<"$res")")
    p99=$(to_ms "$(awk '$1=="99%" {print $2}' <<<"$res")")
    non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$res")
    [ -z "$non2xx" ] || echo "run-gateway: $name had $non2xx non-2xx responses" >&2
    res=$("$tmp/load" -url "http://127.0.0.1:${port[$name]}/v1/items/7" -rate "$RATE" -conns "$CONNS" -duration "$DURATION")
    lp50=$(sed -E 's/.*p50 ([0-9.]+) ms.*/\1/' <<<"$res")
    lp99=$(sed -E 's/.*p99 ([0-9.]+) ms.*/\1/' <<<"$res")
    grep -q "failed 0," <<<"$res" || echo "run-gateway: $name: $res" >&2
    echo "$r $name $rps $p50 $p99 $lp50 $lp99 $cpu" | tee -a "$out"
  done
done

# Medians per contender, and the ratios the targets are about.
awk '
  /^[0-9]/ { rps[$2] = rps[$2] " " $3; p99[$2] = p99[$2] " " $5; lp50[$2] = lp50[$2] " " $6; lp99[$2] = lp99[$2] " " $7; cpu[$2] = cpu[$2] " " $8 }
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    printf "\n%-8s %12s %10s %10s | %10s %10s %12s %12s\n", "median", "wrk req/s", "wrk p99", "cpu µs/req", "load p50", "load p99", "added p50", "added p99"
    d50 = median(lp50["direct"]); d99 = median(lp99["direct"])
    split("direct rk-1 rk-50 rk-net rk-std go-rp go-floor nginx", names, " ")
    for (i = 1; i <= 8; i++) { n = names[i]; printf "%-8s %12.0f %10.2f %10.1f | %10.3f %10.3f %12.3f %12.3f\n", n, median(rps[n]), median(p99[n]), median(cpu[n]), median(lp50[n]), median(lp99[n]), median(lp50[n]) - d50, median(lp99[n]) - d99 }
    printf "\nthroughput vs nginx: rk-1 %.2fx, rk-50 %.2fx, rk-net %.2fx, rk-std %.2fx, go-rp %.2fx, go-floor %.2fx\n", median(rps["rk-1"]) / median(rps["nginx"]), median(rps["rk-50"]) / median(rps["nginx"]), median(rps["rk-net"]) / median(rps["nginx"]), median(rps["rk-std"]) / median(rps["nginx"]), median(rps["go-rp"]) / median(rps["nginx"]), median(rps["go-floor"]) / median(rps["nginx"])
    printf "CPU per request vs nginx: rk-1 %.2fx, rk-50 %.2fx, rk-net %.2fx, rk-std %.2fx, go-rp %.2fx, go-floor %.2fx\n", median(cpu["rk-1"]) / median(cpu["nginx"]), median(cpu["rk-50"]) / median(cpu["nginx"]), median(cpu["rk-net"]) / median(cpu["nginx"]), median(cpu["rk-std"]) / median(cpu["nginx"]), median(cpu["go-rp"]) / median(cpu["nginx"]), median(cpu["go-floor"]) / median(cpu["nginx"])
    printf "throughput vs go-rp: rk-1 %.2fx, rk-50 %.2fx, rk-net %.2fx, rk-std %.2fx\n", median(rps["rk-1"]) / median(rps["go-rp"]), median(rps["rk-50"]) / median(rps["go-rp"]), median(rps["rk-net"]) / median(rps["go-rp"]), median(rps["rk-std"]) / median(rps["go-rp"])
  }' "$out" | tee -a "$out"

# Latency without queueing: one connection, one request at a time. At 64
# connections a saturated proxy's latency is its queue (64 / throughput).
{
  echo
  echo "# one connection (wrk -t1 -c1 -d$DURATION): contender requests/s p50_ms p99_ms"
  for name in "${order[@]}"; do
    res=$(wrk -t1 -c1 -d"$DURATION" --latency -H 'X-User-ID: alice' "http://127.0.0.1:${port[$name]}/v1/items/7")
    echo "c1 $name $(awk '/^Requests\/sec:/ {print $2}' <<<"$res") $(to_ms "$(awk '$1=="50%" {print $2}' <<<"$res")") $(to_ms "$(awk '$1=="99%" {print $2}' <<<"$res")")"
  done
} | tee -a "$out"

# The middleware's decision alone: rule matching + the memory store.
(cd .. && go test -run '^$' -bench 'Decide|Handler' -benchmem -cpu 1,2 -count "$COUNT" ./httplimit/) > results/gateway-go.txt
(cd .. && go tool -modfile=tools/go.mod benchstat bench/results/gateway-go.txt) | tee -a "$out"
