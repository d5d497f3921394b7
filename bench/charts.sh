#!/usr/bin/env bash
# Redraws the charts in docs/benchmarks.md from the results files in
# bench/results (bench/chart reads them as benchstat does: medians over the
# rounds). Each run-*.sh script leaves its raw results there; run this after
# it. Usage: bench/charts.sh
set -euo pipefail
cd "$(dirname "$0")"
img=../docs/img
chart() { go run ./chart "$@"; }

# Series names as the docs write them (-names value=name: no commas).
redis_names='rk-token_bucket=ratekeeper token bucket,rk-fixed_window=ratekeeper fixed window,rk-sliding_window=ratekeeper sliding window,rk-sliding_log=ratekeeper sliding log,redis_rate=go-redis/redis_rate,ulule=ulule/limiter'
redis_order=rk-token_bucket,redis_rate,ulule,rk-fixed_window,rk-sliding_window,rk-sliding_log
gateway_names='rk_1=rk-1 (one rule),rk_50=rk-50 (50 rules),rk_net=rk-net,rk_std=rk-std,go_rp=go-rp,go_floor=go-floor'
gateway_order=direct,rk_1,rk_50,rk_net,rk_std,go_rp,go_floor,nginx
tls_names='ratekeeper=ratekeeper (rk-fast; rk for HTTP/2),ratekeeper_standard=rk-std (net/http for clients),https1.1=HTTPS/1.1,h2=HTTP/2 over TLS,h2c=h2c (HTTP/2 in clear),full=full handshakes,resumed=resumed handshakes'
tls_order=ratekeeper,ratekeeper_standard,nginx

if [[ -s results/memory.txt ]]; then
  memory_names='x_time_rate=x/time/rate,map_mutex=map + sync.Mutex + rate.Limiter,sethvargo=sethvargo/go-limiter,ulule=ulule/limiter'
  chart -in results/memory.txt -match MemoryOneKey -metric sec/op -group mode -series lib -names "$memory_names" \
    -title "Memory store, one key: time per decision (token bucket)" -xlabel "callers: one goroutine (serial) or two (parallel)" \
    -subtitle "medians of 6 interleaved rounds, bench/results/memory.txt" \
    -ylabel "ns per decision (lower is better)" -out "$img/bench-memory-onekey.png"
  chart -in results/memory.txt -match MemoryManyKeys -metric sec/op -series lib -names "$memory_names" \
    -title "Memory store, 1,000,000 random keys, 2 goroutines: time per decision" \
    -subtitle "medians of 6 interleaved rounds, bench/results/memory.txt" \
    -ylabel "ns per decision (lower is better)" -out "$img/bench-memory-manykeys.png"
  chart -in results/memory.txt -match MemoryHeap -metric B/key -group algo -series lib -names "$memory_names" \
    -order ratekeeper,map_mutex,sethvargo,ulule -xlabel "algorithm" \
    -title "Memory store: heap per key with 1,000,000 keys" \
    -subtitle "medians of 6 interleaved rounds, bench/results/memory.txt; the peers have a token bucket or a fixed window only" \
    -ylabel "bytes of heap per key (lower is better)" -out "$img/bench-memory-heap.png"
fi

if [[ -s results/redis.txt ]]; then
  redis() { chart -in results/redis.txt -match Redis/impl -group callers -series impl -order "$redis_order" -names "$redis_names" \
    -xlabel "concurrent callers (goroutines) over 1,000 keys" -subtitle "one local redis-server, 2 shared cores; medians of 5 rounds, bench/results/redis.txt" "$@"; }
  redis -metric decisions/s -title "Redis store: decisions per second" \
    -ylabel "decisions per second (higher is better)" -out "$img/bench-redis.png"
  redis -metric p99-µs -scale 0.001 -title "Redis store: p99 latency of a decision" \
    -ylabel "p99 latency, ms (lower is better)" -out "$img/bench-redis-p99.png"
  redis -metric server-cpu-µs/op -title "Redis store: redis-server's CPU per decision (INFO cpu: scripts, reading, writing)" \
    -ylabel "server CPU µs per decision (lower is better)" -out "$img/bench-redis-cpu.png"
fi

if [[ -s results/rls.txt ]]; then
  rls() { chart -in results/rls.txt -match alg=fixed_window,keys=1/ -group callers -series impl \
    -order ratekeeper,reference,gubernator -names "reference=reference (envoyproxy/ratelimit)" \
    -xlabel "concurrent gRPC callers" -subtitle "fixed window, one key, Redis, lean gRPC client; medians of 4 rounds, bench/results/rls.txt" "$@"; }
  rls -metric decisions/s -title "Decision service: decisions per second" \
    -ylabel "decisions per second (higher is better)" -out "$img/bench-rls.png"
  rls -metric p99-µs -scale 0.001 -title "Decision service: p99 latency of a decision" \
    -ylabel "p99 latency, ms (lower is better)" -out "$img/bench-rls-p99.png"
fi

if [[ -s results/rls-cpu.txt ]]; then
  # run-rls.sh's CPU lines ("cpu impl/alg client=... N decisions/s service
  # X us generator Y us redis Z us") as benchmark lines: the process as the
  # group, the service and algorithm as the series; gubernator uses no
  # Redis, so it has no redis-server bar.
  cpu=$(mktemp)
  awk '$1 == "cpu" && $3 == "client=lean" {
    s = $2; gsub(/\//, "_", s)
    printf "BenchmarkRLSCPU/process=service/impl=%s 1 %s cpu-us/decision\n", s, $7
    printf "BenchmarkRLSCPU/process=generator/impl=%s 1 %s cpu-us/decision\n", s, $10
    if ($2 !~ /^gubernator/) printf "BenchmarkRLSCPU/process=redis/impl=%s 1 %s cpu-us/decision\n", s, $13
  }' results/rls-cpu.txt > "$cpu"
  chart -in "$cpu" -match RLSCPU -metric cpu-us/decision -group process -series impl \
    -order ratekeeper_fixed_window,reference_fixed_window,gubernator_token_bucket,ratekeeper_token_bucket \
    -names 'ratekeeper_fixed_window=ratekeeper fixed window,ratekeeper_token_bucket=ratekeeper token bucket,reference_fixed_window=reference fixed window,gubernator_token_bucket=gubernator token bucket (no Redis),service=the decision service,generator=the load generator (lean client),redis=redis-server' \
    -xlabel "process" -title "Decision service: CPU per decision of each process" \
    -subtitle "64 callers, one key, lean gRPC client; medians of 3 alternating rounds of 4 s, bench/results/rls-cpu.txt" \
    -ylabel "CPU µs per decision (lower is better)" -out "$img/bench-rls-cpu.png"
  rm -f "$cpu"
fi

if [[ -s results/gateway.txt ]]; then
  # run-gateway.sh's rounds ("round contender wrk-req/s wrk-p50 wrk-p99
  # load-p50 load-p99 cpu") as benchmark lines, so that the chart takes
  # their medians like the others ('-' to '_': a name ending in -N would
  # read as a GOMAXPROCS suffix).
  rounds=$(mktemp)
  awk '/^[0-9]+ [a-z]/ && NF >= 8 { gsub(/-/, "_", $2); printf "BenchmarkGateway/contender=%s 1 %s req/s %s load-p99-ms %s cpu-us/req\n", $2, $3, $7, $8 }' results/gateway.txt > "$rounds"
  gateway() { chart -in "$rounds" -match Gateway -series contender -order "$gateway_order" -names "$gateway_names" "$@"; }
  gateway -metric req/s -title "Gateway: requests per second under wrk -t2 -c64" \
    -subtitle "loopback, 2 cores shared with wrk and the upstream; medians of 3 rounds, bench/results/gateway.txt" \
    -ylabel "requests per second (higher is better)" -out "$img/bench-gateway.png"
  gateway -metric cpu-us/req -title "Gateway: CPU per request under wrk -t2 -c64" \
    -subtitle "each proxy's own CPU from /proc (nginx: master and workers; direct: the upstream's); medians of 3 rounds" \
    -ylabel "CPU µs per request (lower is better)" -out "$img/bench-gateway-cpu.png"
  gateway -metric load-p99-ms -minus direct -target 1 -target-label "target: under 1 ms" \
    -title "Gateway: p99 latency each proxy adds" \
    -subtitle "open loop, 2,000 requests/s over 64 connections; each median p99 less the direct path's, 3 rounds" \
    -ylabel "added p99 latency, ms (lower is better)" -out "$img/bench-gateway-p99.png"
  rm -f "$rounds"
fi

# tls_rounds turns run-tls.sh's rounds ("round workload contender req/s p50
# p99 cpu upstream-cpu errors") into benchmark lines: the workload as the
# group, the server as the series; new connections in conns/s and CPU per
# connection, the HTTPS-upstream contenders apart (workload=upstream, with
# rk-fast and nginx's HTTPS/1.1 rounds copied beside them as rk_fast and
# nginx_plain, so that the other charts do not draw them twice).
tls_rounds() {
  awk '/^[0-9]+ [a-z]/ && NF >= 9 {
    hs = $2 == "hs" || $2 == "hr"
    g = $2 == "h1" ? "https1.1" : $2 == "hs" ? "full" : $2 == "hr" ? "resumed" : $3 ~ /h2c/ ? "h2c" : "h2"
    s = $3 ~ /^nginx/ ? "nginx" : $3 == "rk-std" ? "ratekeeper_standard" : "ratekeeper"
    if ($3 ~ /-up-|-tr$/) { s = $3; gsub(/-/, "_", s); g = "upstream" }
    line = sprintf("BenchmarkTLS/workload=%s/server=%s 1 %s %s %s %s %s %s\n", g, s,
      $4, hs ? "conns/s" : "req/s", $6, hs ? "handshake-p99-ms" : "p99-ms", $7, hs ? "cpu-us/conn" : "cpu-us/req")
    printf "%s", line
    if ($2 == "h1" && ($3 == "rk-fast" || $3 == "nginx")) {
      sub(/workload=https1.1/, "workload=upstream", line); sub(/server=ratekeeper /, "server=rk_fast ", line); sub(/server=nginx /, "server=nginx_plain ", line)
      printf "%s", line
    }
  }' "$1"
}
upstream_chart() { # results file, rounds, output, subtitle
  local rounds
  rounds=$(mktemp)
  tls_rounds "$1" > "$rounds"
  chart -in "$rounds" -match workload=upstream -metric cpu-us/req -series server \
    -order rk_fast,rk_std_tr,nginx_plain,rk_up_tls,rk_up_h2,nginx_up_tls \
    -names 'nginx_plain=nginx,rk_fast=rk-fast,rk_std_tr=rk-std-tr,rk_up_tls=rk-up-tls,rk_up_h2=rk-up-h2,nginx_up_tls=nginx-up-tls' \
    -title "$4" -subtitle "wrk -t2 -c64, HTTPS/1.1 at the edge; medians of $2 rounds, bench/results/$(basename "$1")" \
    -ylabel "the proxy's CPU µs per request (lower is better)" -out "$3"
  rm -f "$rounds"
}

if [[ -s results/tls.txt ]]; then
  rounds=$(mktemp)
  tls_rounds results/tls.txt > "$rounds"
  tls() { chart -in "$rounds" -match TLS -group workload -series server -order "$tls_order" -names "$tls_names" \
    -subtitle "same certificate, limit and upstream; 2 shared cores; medians of 9 rounds, bench/results/tls.txt" "$@"; }
  keepalive="keep-alive workload: wrk -c64 (HTTPS/1.1), h2load -c16 -m4 (HTTP/2)"
  tls -metric req/s -xlabel "$keepalive" -title "TLS at the edge, keep-alive: requests per second" \
    -ylabel "requests per second (higher is better)" -out "$img/bench-tls.png"
  tls -metric p99-ms -xlabel "$keepalive" -title "TLS at the edge, keep-alive: p99 latency (64 requests in flight)" \
    -ylabel "p99 latency, ms (lower is better)" -out "$img/bench-tls-p99.png"
  tls -metric cpu-us/req -xlabel "$keepalive" -title "TLS at the edge, keep-alive: the proxy's CPU per request" \
    -ylabel "CPU µs per request (lower is better)" -out "$img/bench-tls-cpu.png"
  tls -metric conns/s -xlabel "64 workers, one request per connection" -title "TLS at the edge: new connections per second" \
    -ylabel "connections per second (higher is better)" -out "$img/bench-tls-handshakes.png"
  tls -metric cpu-us/conn -xlabel "64 workers, one request per connection" -title "TLS at the edge: the proxy's CPU per new connection" \
    -ylabel "CPU µs per connection (lower is better)" -out "$img/bench-tls-handshakes-cpu.png"
  rm -f "$rounds"
fi

if [[ -s results/tls-direct-upstream.txt ]]; then
  upstream_chart results/tls-direct-upstream.txt 3 "$img/bench-tls-upstream-after.png" \
    "HTTP or HTTPS to the upstream, the direct transport speaking TLS: CPU per request"
fi
