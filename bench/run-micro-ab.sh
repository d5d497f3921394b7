#!/usr/bin/env bash
# The library's micro-benchmarks at two revisions side by side: memstore,
# httplimit and rls decisions, and bench's memory comparison with peers,
# rounds alternating so that machine noise spreads over both. The peers'
# code is the same at both revisions: their ratios show the noise, +5% to
# +15% at 4 rounds of 200 ms.
#   bench/run-micro-ab.sh BASE [HEAD]   (git revisions; HEAD by default)
# Env: ROUNDS (4), BENCHTIME (200ms).
# Output: bench/results/micro-ab.txt, benchstat of BASE against HEAD.
set -euo pipefail
cd "$(dirname "$0")"
[ $# -ge 1 ] || { echo "usage: bench/run-micro-ab.sh BASE [HEAD]" >&2; exit 2; }
BASE=$1 HEAD=${2:-HEAD}
ROUNDS=${ROUNDS:-4} BENCHTIME=${BENCHTIME:-200ms}
tmp=$(mktemp -d)
cleanup() {
  for b in base head; do git -C .. worktree remove --force "$tmp/src-$b" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
git -C .. worktree add -q --detach "$tmp/src-base" "$BASE"
git -C .. worktree add -q --detach "$tmp/src-head" "$HEAD"
for _ in $(seq "$ROUNDS"); do
  for b in base head; do
    (cd "$tmp/src-$b" && go test -run '^$' -bench '^Benchmark(Decide|Handler|WriteHeaders|DecideParts|Options|HandlerConcurrency|Codec)$' \
      -benchtime "$BENCHTIME" -count 1 -benchmem ./memstore ./httplimit ./rls | grep '^Benchmark' >>"$tmp/$b.txt")
    (cd "$tmp/src-$b/bench" && go test -run '^$' -bench '^BenchmarkMemory(OneKey|ManyKeys)$' \
      -benchtime "$BENCHTIME" -count 1 -benchmem . | grep '^Benchmark' >>"$tmp/$b.txt")
  done
done
out=results/${OUT:-micro-ab}.txt
{
  echo "# micro A/B $(date -u +%FT%TZ), $(nproc) cores, base $(git -C .. rev-parse --short "$BASE"), head $(git -C .. rev-parse --short "$HEAD"), $ROUNDS rounds of $BENCHTIME"
  (cd .. && go tool -modfile=tools/go.mod benchstat "$tmp/base.txt" "$tmp/head.txt")
} >"$out"
cat "$out"
