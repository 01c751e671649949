#!/usr/bin/env bash
# all.sh - `make bench`: every benchmark, each with its peer where
# installed. Runs them all even when one fails, then lists the failures
# and exits 1 if there was any.
#
#   BENCH_LIST="ingest bench-bo ..."   which to run (default: all below)
#   BENCH_MAKE="make ..."              the make command for the bench-* targets
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE_CMD=${BENCH_MAKE:-make --no-print-directory}
LIST=${BENCH_LIST:-ingest bench-bo bench-mo bench-importance bench-train bench-gemm bench-intervene bench-auth bench-schedulers bench-mf bench-slurm bench-comm bench-safety bench-scale}
failed=(); ran=0
for b in $LIST; do
    if [ "$b" = ingest ]; then
        echo "== ingest (metrics persisted per second)"
        bench/ingest.sh; rc=$?
    elif [ -n "${BENCH_MAKE:-}" ] ||
         grep -q "^$b:" Makefile schedulers/schedulers.mk trainer/trainer.mk 2>/dev/null; then
        echo "== $b"
        $MAKE_CMD "$b"; rc=$?
    else
        continue
    fi
    ran=$((ran + 1))
    [ "$rc" -ne 0 ] && failed+=("$b (exit $rc)")
done
echo
if [ ${#failed[@]} -gt 0 ]; then
    printf 'bench: failed: %s\n' "${failed[@]}"
    echo "bench: ${#failed[@]} of $ran benchmarks failed"
    exit 1
fi
echo "bench: $ran benchmarks ran"
