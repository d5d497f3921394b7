#!/usr/bin/env bash
# The fault harness (bench/faults), every fault in every store mode: three
# `ratekeeper proxy` processes and a `ratekeeper serve` on real Redis
# topologies (standalone, Sentinel with a replica and three sentinels, a
# Cluster of three primaries with replicas), under a steady open-loop load
# above the limits, each fault injected once per run. Each run checks what
# must hold (no failed request, no request past the store timeout plus a
# margin, decisions back to Redis soon after the topology recovers, no
# over-admission past what the design allows, no leak) and leaves a CSV per
# second and a chart in results/faults; results/faults/summary.md is the
# table docs/reliability.md quotes. About 9 minutes.
# Usage: bench/run-faults.sh [-faults name,name] [-modes exact,lease]
# Charts for docs: CHARTS=1 copies them to docs/img/faults-*.png.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results/faults
go test -count=1 -run TestFaults -v -timeout 40m ./faults -faults all -out "$PWD/results/faults" "$@" | tee results/faults.txt
if [ "${CHARTS:-}" = 1 ]; then
  for f in results/faults/*.png; do cp "$f" "../docs/img/faults-$(basename "$f")"; done
fi
