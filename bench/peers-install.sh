#!/usr/bin/env bash
# peers-install.sh - installs the benchmark peers (Optuna, with the
# `cmaes` package its CmaEsSampler needs, and scikit-optimize's
# gp_minimize) for bench-bo and bench-importance when
# they are missing, with pins that keep Debian's numpy 1.24 (newer scipy
# pulls numpy 2, which breaks Debian's torch 1.13; Optuna 4.1+ GPSampler
# needs torch >= 2). Never a dependency of the build or of `make test`: when
# pip cannot install them, the benchmarks skip those peers and say so.
set -uo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
if "$PYTHON" -c "import optuna, cmaes, skopt, sklearn, scipy" 2>/dev/null; then
    exit 0
fi
echo "bench: installing the peers with pip (optuna<4.1, cmaes, scikit-optimize)" >&2
"$PYTHON" -m pip install -q --break-system-packages "optuna<4.1" "cmaes<0.12" scikit-optimize \
    "scipy<1.14" "scikit-learn<1.6" >&2 ||
    echo "bench: pip could not install the peers; the benchmarks skip them" >&2
exit 0
