#!/usr/bin/env bash
# TLS and HTTP/2 at the edge (issue #16): ratekeeper proxy and nginx with
# the same ECDSA P-256 certificate (made here with openssl) and the same
# limit, in front of the same Go upstream, side by side in one run on
# loopback. Four workloads:
#   h1  HTTPS/1.1 keep-alive: wrk -t$THREADS -c$CONNS
#   h2  HTTP/2, over TLS (h2 by ALPN) and clear (h2c, prior knowledge):
#       h2load -t$THREADS -c$H2_CONNS -m$H2_STREAMS (as many requests in
#       flight as wrk's, on fewer connections)
#   hs  a new TLS connection for every request, full handshakes (the
#       server signs): bench/gateway/handshake over $CONNS workers
#   hr  the same, resuming sessions (TLS 1.3 PSK with a fresh X25519
#       exchange), which is what wrk -H 'Connection: close' measures
# Contenders (configs in bench/gateway/tls/):
#   rk-fast    TLS; HTTP/1.1 on the fast path (client_transport: fast),
#              HTTP/2 to net/http; plain-HTTP upstream on the direct transport
#   rk-std     TLS; net/http for every connection (client_transport: standard)
#   rk-std-tr  rk-std with http.Transport to the upstream (upstream_transport:
#              standard): what an https:// upstream always takes
#   rk-up-tls  TLS, and HTTPS to the upstream (HTTP/1.1, verified)
#   rk-up-h2   TLS, and HTTP/2 over TLS to the upstream
#   rk-h2c     clear text, h2c by prior knowledge beside HTTP/1.1
#   rk-h2f, rk-h2cf  rk-fast and rk-h2c with client_h2: frames, the
#              gateway's own HTTP/2 server
#   nginx      nginx 1.22 (2 workers): limit_req at the same limit, TLS 1.3
#              as the gateway negotiates it; nginx-up-tls with HTTPS to the
#              upstream; nginx-h2c clear text, HTTP/2 by prior knowledge
# In the h2 workload "rk" is rk-fast's listener (h2 by ALPN). Each round
# runs every workload's contenders in turn, those compared next to each
# other, forwards in odd rounds and backwards in even ones. CPU per
# request is the contender's processes' (nginx: master and workers) and,
# apart, the upstream's. Reported: each contender's medians over the
# rounds, and each ratio as the median over the rounds of that round's
# ratio (the machine is shared and noisy: a slow swing touches both sides
# of a pair alike, a burst only one round).
# Env: ROUNDS (5), DURATION (3s), CONNS (64), THREADS (2), H2_CONNS (16),
# H2_STREAMS (4), WORKLOADS ("h1 h2 hs hr": a subset), OUT
# (results/tls.txt). QUICK=1: a smoke run (1 round of 2s, under a minute).
# Output: bench/results/tls.txt.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh
if [ -n "${QUICK:-}" ]; then ROUNDS=${ROUNDS:-1} DURATION=${DURATION:-2s}; fi
WORKLOADS=${WORKLOADS:-h1 h2 hs hr}
ROUNDS=${ROUNDS:-5} DURATION=${DURATION:-3s} CONNS=${CONNS:-64} THREADS=${THREADS:-2}
H2_CONNS=${H2_CONNS:-16} H2_STREAMS=${H2_STREAMS:-4}

need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "run-tls: installing ${need[*]}" >&2
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

# One certificate for every TLS listener, the upstream's included (which
# the gateway and nginx verify with it as their CA).
make_cert "$tmp/gw"
(cd .. && go build -o "$tmp/ratekeeper" ./cmd/ratekeeper)
go build -o "$tmp/upstream" ./gateway/upstream
go build -o "$tmp/handshake" ./gateway/handshake

declare -A port
next=18400
for n in up up-tls rk-fast rk-std rk-std-tr rk-up-tls rk-up-h2 rk-h2c rk-h2f rk-h2cf nginx nginx-up-tls nginx-h2c; do
  port[$n]=$(freeport "$next")
  next=$((port[$n] + 1))
done

"$tmp/upstream" -listen "127.0.0.1:${port[up]}" & pids+=($!); pid_up=$!
"$tmp/upstream" -listen "127.0.0.1:${port[up-tls]}" -cert "$tmp/gw.crt" -key "$tmp/gw.key" & pids+=($!); pid_uptls=$!
declare -A pid upstream_pid
rk() { # NAME CONFIG UPSTREAM_PORT
  sed -e "s#@LISTEN@#${port[$1]}#" -e "s#@UPSTREAM@#$3#" "gateway/tls/$2.yaml.in" > "$tmp/$1.yaml"
  "$tmp/ratekeeper" proxy --config "$tmp/$1.yaml" --log-level warn & pids+=($!)
  pid[$1]=$!
}
rk rk-fast fast "${port[up]}"
rk rk-std standard "${port[up]}"
rk rk-std-tr standard-transport "${port[up]}"
rk rk-up-tls tls-upstream "${port[up-tls]}"
rk rk-up-h2 tls-upstream-h2 "${port[up-tls]}"
rk rk-h2c h2c "${port[up]}"
rk rk-h2f frames "${port[up]}"
rk rk-h2cf h2c-frames "${port[up]}"
sed -e "s#@DIR@#$tmp#g" -e "s#@UPSTREAM@#${port[up]}#" -e "s#@UPSTREAM_TLS@#${port[up-tls]}#" \
  -e "s#@NGINX@#${port[nginx]}#" -e "s#@NGINX_UP@#${port[nginx-up-tls]}#" -e "s#@NGINX_H2C@#${port[nginx-h2c]}#" \
  gateway/tls/nginx.conf.in > "$tmp/nginx.conf"
"$NGINX" -p "$tmp" -c "$tmp/nginx.conf" & pids+=($!)
pid[nginx]=$! pid[nginx-up-tls]=$! pid[nginx-h2c]=$!
for n in rk-fast rk-std rk-std-tr rk-h2c rk-h2f rk-h2cf nginx nginx-h2c; do upstream_pid[$n]=$pid_up; done
for n in rk-up-tls rk-up-h2 nginx-up-tls; do upstream_pid[$n]=$pid_uptls; done

# Each workload's contenders and their addresses; before the run, curl
# must get a 200 from each over the protocol its workload speaks.
# The pairs that a ratio below compares are next to each other.
h1=(rk-std rk-fast nginx nginx-up-tls rk-up-h2 rk-up-tls rk-std-tr)
h2=(rk nginx rk-h2f nginx-h2c rk-h2c rk-h2cf)
hs=(rk-std rk-fast nginx)
hr=(rk-fast nginx)
declare -A url
for n in "${h1[@]}"; do url[h1/$n]="https://127.0.0.1:${port[$n]}/v1/items/7"; done
for n in "${hs[@]}"; do url[hs/$n]="127.0.0.1:${port[$n]}"; done
for n in "${hr[@]}"; do url[hr/$n]="127.0.0.1:${port[$n]}"; done
url[h2/rk]="https://127.0.0.1:${port[rk-fast]}/v1/items/7" url[h2/nginx]="https://127.0.0.1:${port[nginx]}/v1/items/7"
url[h2/rk-h2c]="http://127.0.0.1:${port[rk-h2c]}/v1/items/7" url[h2/nginx-h2c]="http://127.0.0.1:${port[nginx-h2c]}/v1/items/7"
url[h2/rk-h2f]="https://127.0.0.1:${port[rk-h2f]}/v1/items/7" url[h2/rk-h2cf]="http://127.0.0.1:${port[rk-h2cf]}/v1/items/7"
pid[rk]=${pid[rk-fast]} upstream_pid[rk]=$pid_up
check() { # WORKLOAD NAME: 200 over the protocol the workload speaks
  local u=${url[$1/$2]} want=1.1 args=(--http1.1 --cacert "$tmp/gw.crt") got=""
  if [ "$1" = h2 ]; then want=2 args=(--http2 --cacert "$tmp/gw.crt"); fi
  if [ "$1" = h2 ] && [[ $u == http:* ]]; then args=(--http2-prior-knowledge); fi
  for _ in $(seq 100); do
    got=$(curl -s -o /dev/null -w '%{http_code} %{http_version}' "${args[@]}" "$u" || true)
    [ "$got" = "200 $want" ] && return 0
    sleep 0.1
  done
  echo "run-tls: $1 $2 ($u) answers '$got', not '200 $want'" >&2
  return 1
}
for n in "${h1[@]}"; do check h1 "$n"; done
for n in "${h2[@]}"; do check h2 "$n"; done

hz=$(getconf CLK_TCK)
out=${OUT:-results/tls.txt}
{
  echo "# TLS benchmark $(date -u +%FT%TZ) at $(git rev-parse --short HEAD), $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $ROUNDS rounds of $DURATION"
  echo "# h1: wrk -t$THREADS -c$CONNS; h2: h2load -t$THREADS -c$H2_CONNS -m$H2_STREAMS; hs, hr: handshake -conns $CONNS (hr: -resume)"
  echo "# $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2); $(h2load --version); $("$NGINX" -v 2>&1); $(openssl version | cut -d' ' -f1-2); $(go version | cut -d' ' -f3-)"
  for n in rk-fast nginx; do
    echo "# $n negotiates: $(openssl s_client -connect "127.0.0.1:${port[$n]}" -servername localhost </dev/null 2>/dev/null | awk '/^New,/ {v = $2 " " $5} /Server Temp Key/ {sub(/.*: /, ""); k = $0} END {print v " key exchange " k}')"
  done
  echo "# round workload contender requests/s p50_ms p99_ms cpu_us/req upstream_cpu_us/req errors"
} > "$out"

# run WORKLOAD NAME ROUND: one measurement, one line.
run() {
  local w=$1 n=$2 u=${url[$1/$2]} res rps nreq p50 p99 errs t0 u0 t1 u1
  t0=$(ticks "${pid[$n]}") u0=$(ticks "${upstream_pid[$n]}")
  if [ "$w" = h2 ]; then
    res=$(h2load -t"$THREADS" -c"$H2_CONNS" -m"$H2_STREAMS" -D"$DURATION" --log-file="$tmp/h2.log" "$u" 2>&1)
    t1=$(ticks "${pid[$n]}") u1=$(ticks "${upstream_pid[$n]}")
    rps=$(awk '/^finished in/ {print $4}' <<<"$res")
    nreq=$(awk '/^requests:/ {print $8}' <<<"$res")
    errs=$(awk '/^requests:/ {print $10 + $12 + $14}' <<<"$res")
    # h2load's log: start, status, duration in µs, one line a request.
    read -r p50 p99 < <(cut -f3 "$tmp/h2.log" | sort -n | awk '{v[NR] = $1} END {printf "%.3f %.3f\n", v[int(NR * 0.5) + 1] / 1000, v[int(NR * 0.99) + 1] / 1000}')
  elif [ "$w" = hs ] || [ "$w" = hr ]; then
    local resume=()
    [ "$w" = hr ] && resume=(-resume)
    # connections N in Ts: R/s, resumed K, failed F, p50 X ms, p99 Y ms
    res=$("$tmp/handshake" -addr "$u" -conns "$CONNS" -duration "$DURATION" "${resume[@]}")
    t1=$(ticks "${pid[$n]}") u1=$(ticks "${upstream_pid[$n]}")
    read -r nreq rps resumed errs p50 p99 < <(tr -d ',:' <<<"$res" | awk '{print $2, $5 + 0, $7, $9, $11, $14}')
    if { [ "$w" = hs ] && [ "$resumed" != 0 ]; } || { [ "$w" = hr ] && [ "$resumed" -lt $((nreq * 9 / 10)) ]; }; then
      echo "run-tls: $w $n: $resumed of $nreq handshakes resumed" >&2
    fi
  else
    res=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$u")
    t1=$(ticks "${pid[$n]}") u1=$(ticks "${upstream_pid[$n]}")
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$res")
    nreq=$(awk '/requests in/ {print $1}' <<<"$res")
    p50=$(to_ms "$(awk '$1=="50%" {print $2}' <<<"$res")")
    p99=$(to_ms "$(awk '$1=="99%" {print $2}' <<<"$res")")
    errs=$(awk '/Non-2xx/ {e += $NF} /Socket errors/ {gsub(/,/, ""); e += $4 + $6 + $8 + $10} END {print e + 0}' <<<"$res")
  fi
  [ "$errs" = 0 ] || echo "run-tls: $w $n: $errs errors" >&2
  awk -v r="$3" -v w="$w" -v n="$n" -v rps="$rps" -v p50="$p50" -v p99="$p99" -v e="$errs" \
    -v c=$((t1 - t0)) -v uc=$((u1 - u0)) -v hz="$hz" -v nreq="$nreq" \
    'BEGIN { printf "%d %s %s %.0f %.3f %.3f %.1f %.1f %d\n", r, w, n, rps, p50, p99, c / hz * 1e6 / nreq, uc / hz * 1e6 / nreq, e }' | tee -a "$out"
}
for r in $(seq "$ROUNDS"); do
  for w in $WORKLOADS; do
    case $w in h1) list=("${h1[@]}") ;; h2) list=("${h2[@]}") ;; hs) list=("${hs[@]}") ;; hr) list=("${hr[@]}") ;; esac
    if ((r % 2 == 0)); then # backwards: each pair's two sides take turns going first
      for ((i = ${#list[@]} - 1; i >= 0; i--)); do run "$w" "${list[$i]}" "$r"; done
    else
      for n in "${list[@]}"; do run "$w" "$n" "$r"; done
    fi
  done
done

# Medians, and the ratios issue #16 asks about: each the median over the
# rounds of one round's ratio between two contenders measured one after
# the other, whom the machine's slower swings touch alike.
awk '
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function m(w, n, f) { return median(v[w, n, f]) }
  function ratio(a, b) { return b > 0 ? a / b : 0 }
  # pair: the median over the rounds of a / b in field f of workload w;
  # lo and hi are the lowest and highest round.
  function pair(w, a, b, f,   r, s, x) {
    s = ""; lo = 1e9; hi = 0
    for (r = 1; r <= rounds; r++) {
      if (!((r, w, a, f) in val) || !((r, w, b, f) in val)) continue
      x = ratio(val[r, w, a, f], val[r, w, b, f]); s = s " " x
      if (x < lo) lo = x
      if (x > hi) hi = x
    }
    return median(s)
  }
  function line(label, w, a, b,   t, tl, th, c) {
    t = pair(w, a, b, 4); tl = lo; th = hi
    if (lo == 1e9) return # a workload not run (WORKLOADS)
    c = pair(w, a, b, 7)
    printf "%-48s %6.2fx (%.2f-%.2f) %6.2fx (%.2f-%.2f)\n", label, t, tl, th, c, lo, hi
  }
  /^[0-9]/ {
    id = $2 SUBSEP $3
    if (!(id in seen)) { seen[id] = 1; order[++count] = id }
    for (f = 4; f <= 8; f++) { v[$2, $3, f] = v[$2, $3, f] " " $f; val[$1, $2, $3, f] = $f }
    errs[$2, $3] += $9
    if ($1 > rounds) rounds = $1
  }
  END {
    printf "\n%-4s %-13s %10s %8s %8s %10s %10s %7s\n", "", "median", "req/s", "p50 ms", "p99 ms", "cpu µs/req", "upstream", "errors"
    for (i = 1; i <= count; i++) {
      split(order[i], k, SUBSEP)
      printf "%-4s %-13s %10.0f %8.3f %8.3f %10.1f %10.1f %7d\n", k[1], k[2], m(k[1], k[2], 4), m(k[1], k[2], 5), m(k[1], k[2], 6), m(k[1], k[2], 7), m(k[1], k[2], 8), errs[k[1], k[2]]
    }
    printf "\n%-48s %20s %20s\n", "ratio, median of the rounds (range)", "throughput", "CPU per request"
    line("HTTPS/1.1: rk-fast / nginx (target >= 0.8x)", "h1", "rk-fast", "nginx"); target = pair("h1", "rk-fast", "nginx", 4)
    line("HTTPS/1.1: rk-std / nginx", "h1", "rk-std", "nginx")
    line("the fast path over TLS: rk-fast / rk-std", "h1", "rk-fast", "rk-std")
    line("the upstream hop'"'"'s TLS: rk-up-tls / rk-std-tr", "h1", "rk-up-tls", "rk-std-tr")
    line("an HTTPS upstream: rk-up-tls / rk-fast", "h1", "rk-up-tls", "rk-fast")
    line("h2 to the upstream: rk-up-h2 / rk-up-tls", "h1", "rk-up-h2", "rk-up-tls")
    line("nginx, HTTPS upstream: nginx-up-tls / nginx", "h1", "nginx-up-tls", "nginx")
    line("HTTP/2 over TLS: rk / nginx", "h2", "rk", "nginx")
    line("h2c: rk-h2c / nginx-h2c", "h2", "rk-h2c", "nginx-h2c")
    line("HTTP/2 over TLS, client_h2 frames: rk-h2f / nginx", "h2", "rk-h2f", "nginx")
    line("h2c, client_h2 frames: rk-h2cf / nginx-h2c", "h2", "rk-h2cf", "nginx-h2c")
    line("client_h2 frames over TLS: rk-h2f / rk", "h2", "rk-h2f", "rk")
    line("full handshakes: rk-fast / nginx", "hs", "rk-fast", "nginx")
    line("full handshakes: rk-std / nginx", "hs", "rk-std", "nginx")
    line("resumed handshakes: rk-fast / nginx", "hr", "rk-fast", "nginx")
    if (("h1", "rk-up-tls", 7) in v) printf "\nthe upstream hop'"'"'s TLS in CPU µs per request (medians): gateway %+.1f (rk-up-tls - rk-std-tr), its upstream %+.1f; nginx %+.1f, its upstream %+.1f\n", m("h1", "rk-up-tls", 7) - m("h1", "rk-std-tr", 7), m("h1", "rk-up-tls", 8) - m("h1", "rk-std-tr", 8), m("h1", "nginx-up-tls", 7) - m("h1", "nginx", 7), m("h1", "nginx-up-tls", 8) - m("h1", "nginx", 8)
    if (("h1", "rk-fast", 4) in v) printf "target, HTTPS/1.1 throughput >= 0.8x nginx: %s (%.2fx)\n", (target >= 0.8 ? "met" : "missed"), target
  }' "$out" | tee -a "$out"
