#!/usr/bin/env bash
# make bench: each part's benchmarks, run side by side with peer libraries in
# one run and summarised with benchstat. Usage: bench/run.sh [part ...]
# Parts: memory redis gateway tls rls hotkey shared-gateway faults (default: all). Raw output goes to
# bench/results/PART.txt; docs/benchmarks.md quotes the summaries.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(memory redis gateway tls rls hotkey shared-gateway)
for p in "${parts[@]}"; do
  if [ -x "./run-$p.sh" ]; then
    echo "== $p"
    "./run-$p.sh"
  else
    echo "== $p: no bench/run-$p.sh yet" >&2
  fi
done

# Redraw the charts in docs/benchmarks.md from the fresh results.
./charts.sh
