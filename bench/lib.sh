# lib.sh: what the bench/run-*.sh scripts share. Source it after `cd` into
# bench/.

# freeport FROM prints the first loopback port from FROM (up to FROM+200)
# nothing listens on.
freeport() {
  local p
  for p in $(seq "$1" $(( $1 + 200 ))); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "bench: no free port from $1" >&2
  return 1
}

# start_redis PORT DIR starts a throwaway redis-server (no persistence) on
# PORT with its files in DIR, installing it first if need be, and waits
# until it answers. Its pid is in $redis_pid.
start_redis() {
  command -v redis-server >/dev/null 2>&1 || ../scripts/test-deps.sh
  redis-server --port "$1" --bind 127.0.0.1 --dir "$2" --save "" --appendonly no \
    --daemonize no --logfile "$2/redis-$1.log" &
  redis_pid=$!
  local _
  for _ in $(seq 100); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "bench: redis-server on $1 did not answer" >&2
  return 1
}

# ticks PID prints the CPU time (user + system, in clock ticks: getconf
# CLK_TCK a second) that PID and its children (nginx's workers) have used.
# On a shared machine, CPU per request is steadier than requests/s.
ticks() {
  local t=0 p
  for p in $1 $(pgrep -P "$1" || true); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}

# to_ms turns a wrk latency (1.23ms, 800.00us, 1.02s) into milliseconds.
to_ms() {
  awk -v v="$1" 'BEGIN{ if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v+0} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000} else print v }'
}

# make_cert PREFIX writes PREFIX.key and PREFIX.crt: an ECDSA P-256
# certificate for localhost and 127.0.0.1, valid two days, self-signed (so
# it is its own CA).
make_cert() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$1.key" -out "$1.crt" 2>/dev/null
}
