#!/bin/sh
# bench/schedulers.sh - `make bench-schedulers`: the schedulers that act on
# running trials, against their baselines at equal compute, on Fashion-MNIST
# with jizhi-train. Each part is a script bench/schedulers_<part>.py (or
# .sh) run in name order; each prints its own table. Benchmarks, not tests:
# the numbers are reported, nothing is asserted.
#
#   BUILD=build PYTHON=/usr/bin/python3 bench/schedulers.sh [--quick]
#   BENCH_SCHED_PARTS="pbt" restricts the parts run.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD=${BUILD:-build}
export BUILD
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
exit $rc
