#!/usr/bin/env bash
# bench-all.sh - `make bench`: every benchmark, each with its peer where installed.
set -uo pipefail
cd "$(dirname "$0")/.."
echo "== ingest (metrics persisted per second)"
bench/ingest.sh
for b in bench-bo bench-train bench-intervene bench-schedulers bench-slurm; do
    if grep -q "^$b:" Makefile schedulers/schedulers.mk trainer/trainer.mk 2>/dev/null; then
        echo "== $b"
        make --no-print-directory "$b"
    fi
done
