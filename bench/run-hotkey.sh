#!/usr/bin/env bash
# The shared modes on one hot global key (bench/hotkey): 3 processes of 64
# callers each take from one fixed window of 1,000,000 per second on one
# local redis-server, in exact mode and in sync and lease modes at sync
# periods of 10ms, 100ms and 1s, ROUNDS times each, the modes taking turns.
# Each line: decisions per second, latency p50/p99, calls to the store per
# second (exact: one per decision, batched; sync and lease: syncs and
# leases), Redis commands per second (those a script runs included) and
# Redis CPU per decision, and in the windows where demand passed the limit
# the most admitted past it (sync) and the most left unused (lease). Then
# the same over 100,000 cold keys, where the local modes cannot help.
# Raw output: results/hotkey.txt.
# Environment: ROUNDS (default 3), DURATION (default 5s), PROCESSES (3),
# CALLERS (64).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
. ./lib.sh
dir=$(mktemp -d)
redis_pid=""
trap 'kill $redis_pid 2>/dev/null; wait $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
port=$(freeport 16600)
start_redis "$port" "$dir"
go build -o "$dir/hotkey" ./hotkey
{
  echo "# $(date -u +%FT%TZ) $(redis-server --version | cut -d' ' -f1-3) on $(nproc) cores shared by redis-server and ${PROCESSES:-3} processes of ${CALLERS:-64} callers"
  for _ in $(seq "${ROUNDS:-3}"); do
    for m in "exact 100ms" "sync 10ms" "sync 100ms" "sync 1s" "lease 10ms" "lease 100ms" "lease 1s"; do
      set -- $m
      "$dir/hotkey" -redis "redis://127.0.0.1:$port/0" -mode "$1" -period "$2" \
        -duration "${DURATION:-5s}" -processes "${PROCESSES:-3}" -callers "${CALLERS:-64}"
    done
    # The other end: 100,000 keys of 10 per second each, every decision on
    # a key the process has hardly seen.
    for m in exact sync lease; do
      "$dir/hotkey" -redis "redis://127.0.0.1:$port/0" -mode "$m" -period 100ms -keys 100000 -rate 10 \
        -duration "${DURATION:-5s}" -processes "${PROCESSES:-3}" -callers "${CALLERS:-64}"
    done
  done
} | tee results/hotkey.txt
