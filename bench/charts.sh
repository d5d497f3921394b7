#!/usr/bin/env bash
# Redraws the charts in docs/benchmarks.md from the results files in
# bench/results (bench/chart reads them as benchstat does: medians over the
# rounds). Each run-*.sh script leaves its raw results there; run this after
# it. Usage: bench/charts.sh
set -euo pipefail
cd "$(dirname "$0")"
img=../docs/img
chart() { go run ./chart "$@"; }

if [[ -s results/memory.txt ]]; then
  chart -in results/memory.txt -match MemoryOneKey -metric sec/op -group mode -series lib \
    -title "One key: time per decision (token bucket)" -out "$img/bench-memory-onekey.png"
  chart -in results/memory.txt -match MemoryManyKeys -metric sec/op -series lib \
    -title "1,000,000 random keys, 2 goroutines: time per decision" -out "$img/bench-memory-manykeys.png"
  chart -in results/memory.txt -match MemoryHeap -metric B/key -group algo -series lib \
    -order ratekeeper,map_mutex,sethvargo,ulule \
    -title "Heap per key with 1,000,000 keys" -out "$img/bench-memory-heap.png"
fi

if [[ -s results/redis.txt ]]; then
  chart -in results/redis.txt -match Redis/impl -metric decisions/s -group callers -series impl \
    -order rk-token_bucket,redis_rate,ulule,rk-fixed_window,rk-sliding_window,rk-sliding_log \
    -title "Redis store: decisions per second against one local redis-server" -out "$img/bench-redis.png"
fi

if [[ -s results/rls.txt ]]; then
  chart -in results/rls.txt -match alg=fixed_window,keys=1/ -metric decisions/s -group callers -series impl \
    -order ratekeeper,reference,gubernator \
    -title "Decision service, fixed window, one key: gRPC decisions per second" -out "$img/bench-rls.png"
fi

if [[ -s results/gateway.txt ]]; then
  # run-gateway.sh's rounds ("round contender req/s ... cpu") as benchmark
  # lines, so that the chart takes their medians like the others ('-' to
  # '_': a name ending in -N would read as a GOMAXPROCS suffix).
  rounds=$(mktemp)
  awk '/^[0-9]+ [a-z]/ && NF >= 8 { gsub(/-/, "_", $2); printf "BenchmarkGateway/contender=%s 1 %s req/s %s cpu-us/req\n", $2, $3, $8 }' results/gateway.txt > "$rounds"
  chart -in "$rounds" -match Gateway -metric req/s -series contender -order direct,nginx,go_floor,rk_1,rk_50,rk_net,rk_std,go_rp \
    -title "Gateway, wrk -c64 on loopback: requests per second (2 cores shared with wrk and the upstream)" -out "$img/bench-gateway.png"
  rm -f "$rounds"
fi

if [[ -s results/tls.txt ]]; then
  # run-tls.sh's rounds ("round workload contender req/s p50 p99 cpu
  # upstream-cpu errors") as benchmark lines: the workload as the group, the
  # server as the series; new connections in conns/s, the HTTPS-upstream
  # contenders apart.
  rounds=$(mktemp)
  awk '/^[0-9]+ [a-z]/ && NF >= 9 {
    g = $2 == "h1" ? "https1.1" : $2 == "hs" ? "full" : $2 == "hr" ? "resumed" : $3 ~ /h2c/ ? "h2c" : "h2"
    s = $3 ~ /^nginx/ ? "nginx" : $3 == "rk-std" ? "ratekeeper_standard" : "ratekeeper"
    u = $2 == "hs" || $2 == "hr" ? "conns/s" : "req/s"
    if ($3 ~ /-up-|-tr$/) { s = $3; gsub(/-/, "_", s); g = "upstream" }
    printf "BenchmarkTLS/workload=%s/server=%s 1 %s %s %s cpu-us/req\n", g, s, $4, u, $7
  }' results/tls.txt > "$rounds"
  chart -in "$rounds" -match TLS -metric req/s -group workload -series server -order ratekeeper,ratekeeper_standard,nginx \
    -title "TLS at the edge, keep-alive: requests per second (same certificate, limit and upstream)" -out "$img/bench-tls.png"
  chart -in "$rounds" -match TLS -metric conns/s -group workload -series server -order ratekeeper,ratekeeper_standard,nginx \
    -title "TLS at the edge: new connections per second, one request each" -out "$img/bench-tls-handshakes.png"
  # HTTPS/1.1 at the edge with each kind of upstream: rk-fast and nginx
  # (plain-HTTP upstream) beside the upstream contenders.
  awk '/workload=https1.1\/server=(ratekeeper|nginx) / { sub(/workload=https1.1/, "workload=upstream"); sub(/server=ratekeeper /, "server=rk_fast "); print } /workload=upstream/' "$rounds" > "$rounds.up"
  chart -in "$rounds.up" -match TLS -metric cpu-us/req -series server -order rk_fast,rk_std_tr,rk_up_tls,rk_up_h2,nginx,nginx_up_tls \
    -title "HTTPS/1.1 at the edge, HTTP or HTTPS to the upstream: proxy CPU µs per request" -out "$img/bench-tls-upstream.png"
  rm -f "$rounds" "$rounds.up"
fi
