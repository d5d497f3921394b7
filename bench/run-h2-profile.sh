#!/usr/bin/env bash
# Where the gateway's CPU goes on HTTP/2, against the HTTP/1.1 fast path
# (issue #31, "measure first"). Counts, not speeds: this machine is
# shared, so each workload is described by what load does not distort.
#   h2    HTTP/2 over TLS (h2 by ALPN): h2load -c$H2_CONNS -m$H2_STREAMS
#   h1    HTTPS/1.1 on the fast path: h2load --h1 -c$H1_CONNS (as many
#         requests in flight as h2's)
#   h2c   HTTP/2 on clear text, prior knowledge
#   h1c   HTTP/1.1 on clear text, on the fast path
# The gateway is bench/gateway/tls/fast.yaml.in (h2, h1) or h2c.yaml.in
# (h2c, h1c), run by bench/gateway/profiled: the gateway with Go's profiler
# on a side listener. The upstream is bench/gateway/upstream. For each
# workload, one at a time:
#   - allocations, bytes, goroutines created and GC cycles a request: the
#     runtime's counters before and after N requests, less what one read
#     of them costs (TLS handshakes included: a connection per client);
#   - the CPU profile over DURATION, each sample put in one category (the
#     first rule of classify that its stack matches), as shares and as µs
#     a request at this run's CPU per request;
#   - syscalls a request: strace -c -f over N_STRACE requests;
#   - what each response costs on the wire: strace -ff of the socket
#     writes over N_TRACE requests, the TLS records (over TLS) or HTTP/2
#     frames (h2c) in each write to the client.
# strace slows the gateway down, which may batch writes differently; the
# counts are for comparing the workloads with each other.
# Then the goroutines created a request, by the function they run (an
# execution trace's goroutine creations, scaled to the count above).
# Env: N (50000), N_STRACE (20000), N_TRACE (2000), DURATION (15),
# H2_CONNS (16), H2_STREAMS (4), H1_CONNS (64), THREADS (2), WORKLOADS
# ("h2 h1 h2c h1c": a subset, in this order), H2_SERVER (standard; frames:
# client_h2: frames, frames.yaml.in and h2c-frames.yaml.in, output in
# h2-profile-frames.txt and h2-profile-frames/).
# Output: bench/results/h2-profile.txt, and the profiles in
# bench/results/h2-profile/ (go tool pprof -top bench/results/h2-profile/h2.cpu).
set -euo pipefail
trap 'echo "run-h2-profile: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")"
. ./lib.sh
N=${N:-50000} N_STRACE=${N_STRACE:-20000} N_TRACE=${N_TRACE:-2000} DURATION=${DURATION:-15}
H2_CONNS=${H2_CONNS:-16} H2_STREAMS=${H2_STREAMS:-4} H1_CONNS=${H1_CONNS:-64} THREADS=${THREADS:-2}

need=()
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
command -v strace >/dev/null 2>&1 || need+=(strace)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "run-h2-profile: installing ${need[*]}" >&2
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

suffix=""
[ "${H2_SERVER:-standard}" = frames ] && suffix=-frames
mkdir -p "results/h2-profile$suffix"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

make_cert "$tmp/gw"
go build -o "$tmp/profiled" ./gateway/profiled
go build -o "$tmp/upstream" ./gateway/upstream

declare -A port
next=18700
for n in up tls clear tls-pprof clear-pprof; do
  port[$n]=$(freeport "$next")
  next=$((port[$n] + 1))
done
"$tmp/upstream" -listen "127.0.0.1:${port[up]}" & pids+=($!)
declare -A pid
gw() { # NAME CONFIG: the gateway NAME with bench/gateway/tls/CONFIG.yaml.in
  sed -e "s#@LISTEN@#${port[$1]}#" -e "s#@UPSTREAM@#${port[up]}#" "gateway/tls/$2.yaml.in" > "$tmp/$1.yaml"
  "$tmp/profiled" -config "$tmp/$1.yaml" -pprof "127.0.0.1:${port[$1-pprof]}" 2>"$tmp/$1.log" & pids+=($!)
  pid[$1]=$!
}
if [ -n "$suffix" ]; then
  gw tls frames
  gw clear h2c-frames
else
  gw tls fast
  gw clear h2c
fi

declare -A url side args
url[h2]="https://127.0.0.1:${port[tls]}/v1/items/7" side[h2]=tls args[h2]="-c$H2_CONNS -m$H2_STREAMS"
url[h1]="https://127.0.0.1:${port[tls]}/v1/items/7" side[h1]=tls args[h1]="--h1 -c$H1_CONNS"
url[h2c]="http://127.0.0.1:${port[clear]}/v1/items/7" side[h2c]=clear args[h2c]="-c$H2_CONNS -m$H2_STREAMS"
url[h1c]="http://127.0.0.1:${port[clear]}/v1/items/7" side[h1c]=clear args[h1c]="--h1 -c$H1_CONNS"
read -r -a workloads <<<"${WORKLOADS:-h2 h1 h2c h1c}"
for w in "${workloads[@]}"; do # a 200 over the protocol the workload names
  got=""
  for _ in $(seq 100); do
    got=$(h2load -n1 ${args[$w]/-c*/-c1} "${url[$w]}" 2>&1 | awk '/^status codes:/ {print $3}')
    [ "$got" = 1 ] && break
    sleep 0.1
  done
  [ "$got" = 1 ] || { echo "run-h2-profile: $w (${url[$w]}) does not answer 200" >&2; exit 1; }
done

# load W N|-DSECONDS: h2load over workload W; prints the requests done.
load() {
  local n=(-n "$2")
  [[ $2 == -D* ]] && n=("$2")
  # shellcheck disable=SC2086 # args holds several flags
  h2load -t"$THREADS" ${args[$1]} "${n[@]}" "${url[$1]}" 2>&1 | awk '/^requests:/ {print $8} /^requests:/ && $10 + $12 + $14 > 0 {print "run-h2-profile: errors: " $0 > "/dev/stderr"}'
}
# counts SIDE: the gateway's allocations, bytes allocated, goroutines
# created and GC cycles so far (bench/gateway/profiled's /debug/counters).
counts() {
  curl -s "127.0.0.1:${port[$1-pprof]}/debug/counters" | awk '{printf "%s ", $2} END {print ""}'
}

# classify: go tool pprof -traces in, one line a category out (µs of CPU
# and the category), each sample in the first category its stack matches.
# Syscalls by their leaf and caller first, then what is spread over every
# stage (GC, allocation, stack growth, scheduling, timers, TLS), then the
# innermost stage of the request path.
classify() {
  awk '
    function cat(s, leaf) {
      if (leaf ~ /Syscall6|^syscall\.|runtime\.(futex|usleep|osyield|epollwait)$/) {
        if (s ~ /runtime\.netpoll/) return "kernel: epoll_wait (scheduler)"
        if (leaf ~ /^runtime\./) return "kernel: futex, usleep (threads sleep and wake)"
        # Client or upstream: the fast path writes to both from its own
        # frames, so the stack does not tell them apart.
        if (s ~ /\(\*FD\)\.Write/) return "kernel: socket writes, client and upstream"
        if (s ~ /\(\*FD\)\.Read|[Rr]ecvfrom/) return "kernel: socket reads, upstream peek"
        return "kernel: other syscalls"
      }
      if (s ~ /runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|gcAssistAlloc|markroot|gcStart|gcMarkDone)/) return "GC"
      if (s ~ /runtime\.(mallocgc|newobject|makeslice|growslice|makemap)/) return "allocation (mallocgc)"
      if (s ~ /runtime\.(newstack|morestack)/) return "goroutine stack growth (copystack)"
      if (s ~ /crypto\/tls\.\(\*Conn\)\.(serverHandshake|handshakeContext)/) return "TLS handshakes (amortized)"
      if (s ~ /time\.(AfterFunc|newTimer|\(\*Timer\))|runtime\.(\(\*timer|\(\*timers|modtimer|deltimer|addtimer|runtimer)/) return "timers (deadlines)"
      if (s ~ /runtime\.(schedule|findRunnable|park_m|goready|ready|wakep|startm|stopm|newproc|goexit|gopark|mcall|selectgo|chansend|chanrecv|closechan|notewakeup|notesleep)/) return "goroutines: scheduler, channels, select"
      if (s ~ /crypto\//) return "TLS records: encrypt, decrypt"
      if (s ~ /gateway\/internal\/upstream\./) return "upstream hop (direct transport, HTTP/1.1)"
      if (s ~ /hpack\./) return "HPACK"
      if (s ~ /httputil\.\(\*ReverseProxy\)/) return "httputil.ReverseProxy"
      if (s ~ /ratekeeper\/(httplimit|rules|memstore|internal\/algo)\./) return "decision: rules, store, headers"
      if (s ~ /gateway\/internal\/(fastpath|h1)\./) return "fast path: HTTP/1.1 read, write"
      if (s ~ /gateway\/internal\/h2\./) return "the gateway'"'"'s HTTP/2 server (client_h2: frames)"
      if (s ~ /ratekeeper\/gateway\./) return "gateway: request view, body, writers"
      if (s ~ /net\/http\.(\(\*)?http2/) return "net/http HTTP/2: frames, streams"
      if (s ~ /net\/http\./) return "net/http, other"
      return "other: runtime, bufio, net"
    }
    function flush() { if (stack != "") t[cat(stack, leaf)] += v; stack = "" }
    /^-+\+/ { flush(); next }
    /^ +[0-9.]+(ms|s|us) +/ {
      flush(); v = $1; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
      v *= (u == "s" ? 1e6 : u == "ms" ? 1e3 : 1); leaf = $2; stack = $2; next
    }
    stack != "" && NF { stack = stack " " $1 }
    END { flush(); for (k in t) printf "%.0f\t%s\n", t[k], k }'
}

# records W: the strace -ff files in; each write to the client (the local
# port is the gateway's) split into the TLS records (h2, h1) or HTTP/2
# frames (h2c) its bytes hold. Prints: writes to the client, bytes,
# records or frames (h1c: writes), writes to the upstream, frame kinds.
records() {
  local mode=none
  case $1 in h2 | h1) mode=tls ;; h2c) mode=frames ;; esac
  awk -v gw="${port[${side[$1]}]}" -v up="${port[up]}" -v mode="$mode" '
    function hex(s, i) { return index("0123456789abcdef", substr(s, i, 1)) - 1 }
    function byte(s, k) { return hex(s, 4 * k + 3) * 16 + hex(s, 4 * k + 4) }
    /^(write|writev|sendmsg)\(/ && / = [0-9]+$/ {
      n = $NF + 0
      if ($0 ~ "->127.0.0.1:" up "\\]") { upw++; next }
      if ($0 !~ "127.0.0.1:" gw "->") next
      match($0, /"(\\x[0-9a-f][0-9a-f])+"/); s = substr($0, RSTART + 1, RLENGTH - 2)
      if (mode == "tls" && byte(s, 0) != 23) next # a handshake flight, not a response
      w++; b += n
      if (mode == "none") { r++; next }
      for (i = 0; i + 5 <= n; ) {
        if (mode == "tls") { r++; i += 5 + byte(s, i + 3) * 256 + byte(s, i + 4) }
        else { f[byte(s, i + 3)]++; r++; i += 9 + byte(s, i) * 65536 + byte(s, i + 1) * 256 + byte(s, i + 2) }
      }
    }
    END {
      split("DATA HEADERS PRIORITY RST_STREAM SETTINGS PUSH_PROMISE PING GOAWAY WINDOW_UPDATE CONTINUATION", name, " ")
      kinds = ""
      for (k in f) kinds = kinds sprintf(" %s:%d", name[k + 1], f[k])
      printf "%d %d %d %d%s\n", w, b, r, upw, kinds
    }' "$tmp"/trace.*
}

out=results/h2-profile$suffix.txt
{
  echo "# HTTP/2 profile $(date -u +%FT%TZ) at $(git rev-parse --short HEAD), $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# h2, h2c: h2load -t$THREADS -c$H2_CONNS -m$H2_STREAMS; h1, h1c: h2load -t$THREADS --h1 -c$H1_CONNS; $(h2load --version); $(strace -V | head -1); $(go version | cut -d' ' -f3-)"
  echo "# allocations over N=$N requests, CPU profile over ${DURATION}s, strace -c over N_STRACE=$N_STRACE, writes over N_TRACE=$N_TRACE"
} > "$out"

declare -A allocs bytes gor gcs cpu sys wire
touch "$tmp/creators"
for w in "${workloads[@]}"; do
  s=${side[$w]}
  load "$w" 2000 >/dev/null # warm: connections, pools, stacks
  c0=$(counts "$s"); c1=$(counts "$s")
  done_n=$(load "$w" "$N")
  c2=$(counts "$s")
  # per request: (c2 - c1) less what one read of the counters costs (c1 - c0)
  read -r allocs[$w] bytes[$w] gor[$w] gcs[$w] < <(awk -v a="$c0" -v b="$c1" -v c="$c2" -v n="$done_n" 'BEGIN {
    split(a, x, " "); split(b, y, " "); split(c, z, " ")
    printf "%.1f %.0f %.2f %.4f\n", (z[1] - 2 * y[1] + x[1]) / n, (z[2] - 2 * y[2] + x[2]) / n, (z[3] - y[3]) / n, (z[4] - y[4]) / n }')

  curl -s -o "results/h2-profile$suffix/$w.cpu" "127.0.0.1:${port[$s-pprof]}/debug/pprof/profile?seconds=$DURATION" & prof=$!
  sleep 0.2
  done_n=$(load "$w" "-D$DURATION")
  wait "$prof"
  go tool pprof -traces "$tmp/profiled" "results/h2-profile$suffix/$w.cpu" 2>/dev/null | classify > "$tmp/$w.cat"
  cpu[$w]=$(awk -v n="$done_n" '{t += $1} END {printf "%.1f", t / n}' "$tmp/$w.cat")
  awk -F'\t' -v n="$done_n" -v w="$w" '{printf "%s\t%.2f\t%s\n", w, $1 / n, $2}' "$tmp/$w.cat" >> "$tmp/cats"

  strace -qq -c -f -p "${pid[$s]}" -o "$tmp/strace-c" & st=$!
  sleep 1
  done_n=$(load "$w" "$N_STRACE")
  kill -INT "$st"; wait "$st" || true
  awk -v n="$done_n" -v w="$w" '$NF ~ /^[a-z_0-9]+$/ && $(NF-1) ~ /^[0-9]+$/ && $NF != "total" {
      c = ($(NF-2) ~ /^[0-9]+$/ && NF == 6) ? $(NF-2) : $(NF-1); printf "%s\t%s\t%.2f\n", w, $NF, c / n }' "$tmp/strace-c" >> "$tmp/sys"
  sys[$w]=$(awk '$1 == "'"$w"'" {t += $3} END {printf "%.1f", t}' "$tmp/sys")

  rm -f "$tmp"/trace.*
  strace -qq -ff -yy -xx -s 65536 -e trace=write,writev,sendmsg -e signal=none -p "${pid[$s]}" -o "$tmp/trace" & st=$!
  sleep 1
  done_n=$(load "$w" "$N_TRACE")
  kill -INT "$st"; wait "$st" || true
  wire[$w]="$done_n $(records "$w")"

  # Who creates the goroutines: an execution trace of 2 s of load, its
  # goroutine creations by function, scaled to the count a request above.
  curl -s -o "$tmp/trace.out" "127.0.0.1:${port[$s-pprof]}/debug/pprof/trace?seconds=2" & tr=$!
  load "$w" -D2 >/dev/null
  wait "$tr"
  go tool trace -d=parsed "$tmp/trace.out" 2>/dev/null |
    awk '/NotExist->Runnable/ {g = 1; next} g == 1 && /TransitionStack=/ {g = 2; next} g == 2 && /^\t[a-zA-Z]/ {print $1; g = 0}' |
    { grep -v '^runtime' || true; } | sort | uniq -c |
    awk -v w="$w" -v per="${gor[$w]}" '{n[$2] = $1; t += $1} END {for (k in n) if (per > 0 && n[k] / t >= 0.01) printf "%s\t%.2f\t%s\n", w, per * n[k] / t, k}' >> "$tmp/creators"
  echo "run-h2-profile: $w done" >&2
done

{
  echo
  printf "%-5s %11s %10s %15s %11s %11s %13s\n" "" "allocs/req" "bytes/req" "goroutines/req" "GCs/kreq" "CPU µs/req" "syscalls/req"
  for w in "${workloads[@]}"; do
    printf "%-5s %11s %10s %15s %11.2f %11s %13s\n" "$w" "${allocs[$w]}" "${bytes[$w]}" "${gor[$w]}" "$(awk -v g="${gcs[$w]}" 'BEGIN {print g * 1000}')" "${cpu[$w]}" "${sys[$w]}"
  done
  echo
  echo "CPU µs a request by category (this run's load inflates them alike; shares in brackets)"
  awk -F'\t' -v ws="${workloads[*]}" '
    { v[$3, $1] = $2; tot[$1] += $2; if (!($3 in seen)) { seen[$3] = 1; cats[++nc] = $3 } }
    END {
      nw = split(ws, w, " ")
      printf "%-48s", "category"; for (i = 1; i <= nw; i++) printf " %15s", w[i]; printf "\n"
      # the categories in the order of h2 - h1, the largest extra first
      for (a = 1; a <= nc; a++) for (b = a + 1; b <= nc; b++)
        if (v[cats[b], "h2"] - v[cats[b], "h1"] > v[cats[a], "h2"] - v[cats[a], "h1"]) { t = cats[a]; cats[a] = cats[b]; cats[b] = t }
      for (a = 1; a <= nc; a++) {
        printf "%-48s", cats[a]
        for (i = 1; i <= nw; i++) printf " %7.2f (%4.1f%%)", v[cats[a], w[i]], tot[w[i]] ? 100 * v[cats[a], w[i]] / tot[w[i]] : 0
        printf "\n"
      }
      printf "%-48s", "total"; for (i = 1; i <= nw; i++) printf " %7.2f         ", tot[w[i]]; printf "\n"
      if (!tot["h2"] || !tot["h1"]) exit
      printf "\nh2 - h1 by category, as a share of the difference (%.2f µs):\n", tot["h2"] - tot["h1"]
      for (a = 1; a <= nc; a++) if ((d = v[cats[a], "h2"] - v[cats[a], "h1"]) != 0)
        printf "  %-48s %+7.2f µs %6.1f%%\n", cats[a], d, 100 * d / (tot["h2"] - tot["h1"])
    }' "$tmp/cats"
  echo
  echo "the same in groups: shares of each workload's CPU, and of h2's extra over h1"
  awk -F'\t' -v ws="${workloads[*]}" '
    function group(c) {
      if (c ~ /^goroutine|^timers|futex|epoll_wait/) return "goroutines: per stream, per frame write (sched, stacks, timers)"
      if (c ~ /^allocation|^GC/) return "allocation and GC"
      if (c ~ /^net\/http|^HPACK/) return "net/http HTTP/2 server, HPACK"
      if (c ~ /ReverseProxy|^upstream hop/) return "ReverseProxy, upstream hop as a RoundTripper"
      if (c ~ /^kernel/) return "kernel: socket reads and writes"
      if (c ~ /^TLS/) return "TLS: records, handshakes"
      if (c ~ /^decision|^gateway/) return "decision, request view"
      if (c ~ /^fast path/) return "fast path: HTTP/1.1 read, write"
      return "other"
    }
    { g = group($3); v[g, $1] += $2; tot[$1] += $2; if (!(g in seen)) { seen[g] = 1; gs[++ng] = g } }
    END {
      nw = split(ws, w, " ")
      for (a = 1; a <= ng; a++) k[gs[a]] = v[gs[a], w[1]] - v[gs[a], "h1"] # the largest extra first
      for (a = 1; a <= ng; a++) for (b = a + 1; b <= ng; b++) if (k[gs[b]] > k[gs[a]]) { t = gs[a]; gs[a] = gs[b]; gs[b] = t }
      printf "%-64s", "group"; for (i = 1; i <= nw; i++) printf " %6s", w[i]; if (tot["h2"] && tot["h1"]) printf " %8s", "h2 - h1"; printf "\n"
      for (a = 1; a <= ng; a++) {
        printf "%-64s", gs[a]
        for (i = 1; i <= nw; i++) printf " %5.1f%%", tot[w[i]] ? 100 * v[gs[a], w[i]] / tot[w[i]] : 0
        if (tot["h2"] && tot["h1"]) printf " %7.1f%%", 100 * (v[gs[a], "h2"] - v[gs[a], "h1"]) / (tot["h2"] - tot["h1"])
        printf "\n"
      }
    }' "$tmp/cats"
  echo
  echo "syscalls a request (strace -c -f)"
  awk -F'\t' -v ws="${workloads[*]}" '
    { v[$2, $1] = $3; if (!($2 in seen)) { seen[$2] = 1; s[++ns] = $2 } }
    END {
      nw = split(ws, w, " ")
      printf "%-16s", "syscall"; for (i = 1; i <= nw; i++) printf " %7s", w[i]; printf "\n"
      for (a = 1; a <= ns; a++) {
        keep = 0; for (i = 1; i <= nw; i++) if (v[s[a], w[i]] >= 0.01) keep = 1
        if (!keep) continue
        printf "%-16s", s[a]; for (i = 1; i <= nw; i++) printf " %7.2f", v[s[a], w[i]]; printf "\n"
      }
    }' "$tmp/sys"
  echo
  echo "goroutines created a request, by the function each runs (execution trace, 2 s of load)"
  sort -t$'\t' -k1,1 -k2,2nr "$tmp/creators" | awk -F'\t' '{printf "%-5s %6.2f  %s\n", $1, $2, $3}'
  echo
  echo "each response on the wire (strace -ff of writes over N_TRACE requests): writes to the client,"
  echo "bytes, TLS records (h2, h1) or HTTP/2 frames (h2c; h1c: none), writes to the upstream, a request"
  for w in "${workloads[@]}"; do
    read -r n cw cb cr uw kinds <<<"${wire[$w]}"
    awk -v w="$w" -v n="$n" -v cw="$cw" -v cb="$cb" -v cr="$cr" -v uw="$uw" -v k="${kinds:-}" 'BEGIN {
      printf "%-5s client writes %.2f, %.0f bytes, records or frames %.2f; upstream writes %.2f", w, cw / n, cb / n, cr / n, uw / n
      if (k != "" && w == "h2c") {
        m = split(k, kv, " "); printf ";"
        for (i = 1; i <= m; i++) { split(kv[i], p, ":"); printf " %s %.2f", p[1], p[2] / n }
      }
      printf "\n" }'
  done
} | tee -a "$out"
