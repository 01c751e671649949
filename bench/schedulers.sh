#!/bin/sh
# bench/schedulers.sh - `make bench-schedulers`: the schedulers that act on
# running trials, against their baselines at equal compute, on Fashion-MNIST
# with jizhi-train. Each part is a script bench/schedulers_<part>.py (or
# .sh) run in name order; each prints its own table. Benchmarks, not tests:
# the numbers are reported, nothing is asserted.
#
#   BUILD=build PYTHON=/usr/bin/python3 bench/schedulers.sh [--quick]
#   BENCH_SCHED_PARTS="pbt batchsize" restricts the parts run (asha,
#   batchsize, batchsize_adaptdl, pbt). The parts merge their medians into
#   $BUILD/bench/schedulers.json (BENCH_SCHED_JSON overrides the path):
#   {"pbt": {"jizhi"|"ray"|"no_pbt": {best_val_acc, mean_val_acc, wall_s,
#   ...}}, "batchsize": {"jizhi": {time_to_target_s, samples_to_target},
#   "best_fixed": {..., batch_size}, ...}, "batchsize_adaptdl": {...}}. The
#   pbt part installs ray[tune] into $BUILD/bench/ray-venv on first use, and
#   batchsize_adaptdl AdaptDL (Pollux's library) into
#   $BUILD/bench/adaptdl-venv (PyPI, pinned, for the benchmarks only);
#   without them those arms are SKIPPED.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD=${BUILD:-build}
export BUILD
BENCH_SCHED_JSON=${BENCH_SCHED_JSON:-$BUILD/bench/schedulers.json}
export BENCH_SCHED_JSON
mkdir -p "$(dirname "$BENCH_SCHED_JSON")"
rm -f "$BENCH_SCHED_JSON"
rc=0
for f in bench/schedulers_*.py bench/schedulers_*.sh; do
    [ -e "$f" ] || continue
    part=$(basename "$f" | sed -e 's/^schedulers_//' -e 's/\.[a-z]*$//')
    if [ -n "${BENCH_SCHED_PARTS:-}" ]; then
        case " $BENCH_SCHED_PARTS " in *" $part "*) ;; *) continue ;; esac
    fi
    echo "== bench-schedulers: $part =="
    case "$f" in
    *.py) "$PYTHON" "$f" "$@" || rc=1 ;;
    *.sh) sh "$f" "$@" || rc=1 ;;
    esac
done
[ -f "$BENCH_SCHED_JSON" ] && echo "bench-schedulers: wrote $BENCH_SCHED_JSON"
exit $rc
