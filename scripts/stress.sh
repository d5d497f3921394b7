#!/usr/bin/env bash
# stress.sh: runs the tests that decide on real servers many times with
# -race while another process keeps a core busy, and reports every failure.
# `make stress` calls it; it is on demand, not in CI.
#
#   STRESS_ROUNDS=5    rounds; each runs every part once
#   STRESS_PARTS="..." the parts to run (names below; default: all)
#   STRESS_BUSY=1      processes that keep a core busy meanwhile (0: none)
#   STRESS_LINES=30    lines of output shown for each failure
#   STRESS_FAULTS_MARGIN=2s  bench/faults' -margin: how much longer than the
#                      store timeout a request may take. Its default (250ms,
#                      as make test runs it) bounds latency on a machine with
#                      a core to spare; beside a busy core it measures the
#                      machine, so stress checks the rest at a looser bound.
#   STRESS_SYNC_COUNT=100  how many times each round runs sync mode's
#                      conformance timelines (part conformance-sync): one run
#                      in a few hundred caught its last two bugs
#   STRESS_DIR=dir     where the binaries and each failing run's log go
#                      (default: a new directory under /tmp, kept)
#
# It prints each failure (part, round, the tests that failed and the first
# lines of their output) and ends with "N runs, M failures"; it exits 1 if
# any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${STRESS_ROUNDS:-5}
busy=${STRESS_BUSY:-1}
lines=${STRESS_LINES:-30}
dir=${STRESS_DIR:-$(mktemp -d /tmp/ratekeeper-stress.XXXXXX)}
mkdir -p "$dir"

# part: name, module directory, package, and the -run pattern ("" for all).
parts=(
  "redisstore . ./redisstore"
  "failsafe . ./failsafe"
  "conformance-sync . ./redisstore ^TestConformanceSync$"
  "shared . ./internal/shared"
  "gateway-e2e . ./cmd/ratekeeper ^(TestE2E|TestServe)"
  "faults bench ./faults"
)
faults_margin=${STRESS_FAULTS_MARGIN:-2s}
sync_count=${STRESS_SYNC_COUNT:-100}
want=${STRESS_PARTS:-redisstore conformance-sync failsafe shared gateway-e2e faults}

export CI=true # a test that needs a server fails without one, never skips
busy_pids=()
running="" # the process group of the test binary running now
stop_busy() {
  [ -n "$running" ] && kill -KILL -- "-$running" 2>/dev/null
  for pid in "${busy_pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${busy_pids[@]}"; do wait "$pid" 2>/dev/null; done
  busy_pids=()
}
trap stop_busy EXIT
trap 'stop_busy; exit 130' INT TERM

# build compiles a part's test binary once: every round runs the same one.
build() {
  local name=$1 mod=$2 pkg=$3
  echo "stress: building $name ($pkg)"
  (cd "$mod" && go test -race -c -o "$dir/$name.test" "$pkg") || return 1
}

# report prints a failed run: each test that failed (the innermost
# subtests) with the first lines of its output, a data race's first lines,
# or, when no test says it failed (a panic, a timeout), the lines from the
# first panic or FAIL.
report() {
  local name=$1 round=$2 log=$3
  echo "FAIL $name round $round (log: $log)"
  local failed leaves=() t
  failed=$(grep -E '^ *--- FAIL: ' "$log" | sed -E 's/^ *--- FAIL: ([^ ]+).*/\1/' | sort -u)
  for t in $failed; do # a leaf: no other failed test is its subtest
    awk -v t="$t/" 'index($0, t) == 1 { f = 1 } END { exit !f }' <<<"$failed" || leaves+=("$t")
  done
  for t in "${leaves[@]}"; do
    echo "  $t"
    # Without -v, a failed test's output follows its "--- FAIL" line,
    # indented deeper.
    awk -v t="$t" '
      index($0, "--- FAIL: " t " (") { on = 1; match($0, /^ */); depth = RLENGTH; next }
      on { match($0, /^ */); if (RLENGTH <= depth) exit; print }
    ' "$log" | head -n "$lines" | sed -E 's/^[[:space:]]*/    /'
  done
  if grep -q '^WARNING: DATA RACE' "$log"; then
    sed -n '/^WARNING: DATA RACE/,$p' "$log" | head -n "$lines" | sed 's/^/    /'
  elif [ ${#leaves[@]} -eq 0 ]; then
    sed -n '/^panic: \|^FAIL/,$p' "$log" | head -n "$lines" | sed 's/^/    /'
  fi
}

declare -a names mods pkgs runs
for p in "${parts[@]}"; do
  read -r name mod pkg run <<<"$p"
  case " $want " in *" $name "*) ;; *) continue ;; esac
  if ! build "$name" "$mod" "$pkg"; then
    echo "stress: $name does not build" >&2
    exit 2
  fi
  names+=("$name") mods+=("$mod") pkgs+=("$pkg") runs+=("${run:-}")
done
if [ ${#names[@]} -eq 0 ]; then
  echo "stress: no part in STRESS_PARTS=\"$want\"" >&2
  exit 2
fi

for ((i = 0; i < busy; i++)); do
  yes >/dev/null &
  busy_pids+=($!)
done

total=0 failures=0
start=$SECONDS
for ((round = 1; round <= rounds; round++)); do
  for i in "${!names[@]}"; do
    name=${names[$i]}
    log="$dir/$name-$round.log"
    args=(-test.count=1 -test.timeout=20m)
    [ -n "${runs[$i]}" ] && args+=(-test.run "${runs[$i]}")
    [ "$name" = faults ] && args+=(-margin "$faults_margin")
    [ "$name" = conformance-sync ] && args+=(-test.count="$sync_count")
    t0=$SECONDS
    # A test binary runs in its package's directory, as go test runs it,
    # in a process group of its own: what it started and left behind (the
    # Redis servers of a run that timed out) is stopped after it.
    (cd "${mods[$i]}/${pkgs[$i]}" && exec setsid "$dir/$name.test" "${args[@]}") >"$log" 2>&1 &
    running=$!
    wait "$running"
    rc=$?
    kill -KILL -- "-$running" 2>/dev/null
    running=""
    total=$((total + 1))
    if [ $rc -ne 0 ]; then
      failures=$((failures + 1))
      report "$name" "$round" "$log"
    else
      echo "ok   $name round $round ($((SECONDS - t0)) s)"
      rm -f "$log"
    fi
  done
done
stop_busy

echo "stress: $total runs, $failures failures ($rounds rounds, $((SECONDS - start)) s, logs in $dir)"
[ "$failures" -eq 0 ]
