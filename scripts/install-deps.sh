#!/usr/bin/env bash
# install-deps.sh - installs the Debian packages jizhi needs (docs/design.md, Dependencies).
# Idempotent: does nothing when every package is already installed.
# Called by `make run` (with --run: only what building and running the
# example study needs), `make test` and .ci/run (everything the tests use).
# When another apt or dpkg holds the package lock, it waits for it (up to
# JIZHI_APT_WAIT seconds, default 600) instead of failing.
set -euo pipefail

# What `make run` needs: the build, and Fashion-MNIST for the example.
# libdnnl-dev: oneDNN, jizhi-train's CPU convolutions (the build falls
# back to im2col + GEMM without it).
RUN_PKGS=(build-essential pkg-config libzmq3-dev libsqlite3-dev sqlite3
      libjansson-dev libgsl-dev libopenblas-dev libdnnl-dev zlib1g-dev libncurses-dev
      libmicrohttpd-dev libsodium-dev libjs-chart.js dataset-fashion-mnist python3)
# What the tests add: formatting, fuzzing, pytest, MPI, the Python package's
# build tools and a ZeroMQ client for the attacker tests.
PKGS=("${RUN_PKGS[@]}" clang clang-format python3-pytest python3-pip python3-setuptools
      python3-wheel python3-venv python3-zmq tmux
      openmpi-bin libopenmpi-dev)
# The Slurm backend's tests and bench-slurm start a one-node cluster
# (tests/slurm/cluster.sh): slurm-wlm (slurmctld, slurmd, the client
# commands) and munge. JIZHI_NO_SLURM=1 leaves them out (those tests skip).
SLURM=(slurm-wlm munge)
[ "${JIZHI_NO_SLURM:-0}" = 1 ] && SLURM=()
# Optional: the browser the web tests and bench-web drive (they report
# SKIPPED without it). JIZHI_NO_BROWSER=1 leaves it out.
BROWSER=(chromium chromium-driver python3-selenium)
# Optional: the PyTorch peer for the trainer's tests and benchmarks
# (JIZHI_NO_TORCH=1 leaves it out), and BLIS, the other BLAS bench-gemm and
# its test measure OpenBLAS against.
OPTIONAL=(libblis4)
[ "${JIZHI_NO_TORCH:-0}" = 1 ] || OPTIONAL+=(python3-torch)
[ "${JIZHI_NO_BROWSER:-0}" = 1 ] && BROWSER=()
LIST=0
for a in "$@"; do
    case $a in
    --run) PKGS=("${RUN_PKGS[@]}"); SLURM=(); OPTIONAL=(); BROWSER=() ;;
    --list) LIST=1 ;; # print the packages it would ensure, install nothing
    *) echo "usage: scripts/install-deps.sh [--run] [--list]" >&2; exit 2 ;;
    esac
done
if [ $LIST = 1 ]; then
    printf '%s\n' "${PKGS[@]}" "${SLURM[@]}" "${OPTIONAL[@]}" "${BROWSER[@]}"
    exit 0
fi

missing=()
for p in "${PKGS[@]}" "${SLURM[@]}" "${OPTIONAL[@]}" "${BROWSER[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Wait for the lock another apt or dpkg holds rather than fail at once.
LOCK=(-o "DPkg::Lock::Timeout=${JIZHI_APT_WAIT:-600}")
$SUDO apt-get "${LOCK[@]}" update -qq
$SUDO apt-get "${LOCK[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
