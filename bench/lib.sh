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
