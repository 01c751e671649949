#!/usr/bin/env bash
# install-deps.sh - installs the Debian packages jizhi needs (docs/design.md, Dependencies).
# Idempotent: does nothing when every package is already installed.
# Called by `make run`, `make test` and .ci/run.
set -euo pipefail

PKGS=(build-essential pkg-config clang clang-format libzmq3-dev libsqlite3-dev sqlite3
      libjansson-dev libgsl-dev libopenblas-dev zlib1g-dev libncurses-dev
      libmicrohttpd-dev libsodium-dev libjs-chart.js
      dataset-fashion-mnist python3 python3-pytest python3-pip python3-setuptools
      python3-wheel python3-zmq tmux
      openmpi-bin libopenmpi-dev)
# The Slurm backend's tests and bench-slurm start a one-node cluster
# (tests/slurm/cluster.sh): slurm-wlm (slurmctld, slurmd, the client
# commands) and munge. JIZHI_NO_SLURM=1 leaves them out (those tests skip).
SLURM=(slurm-wlm munge)
[ "${JIZHI_NO_SLURM:-0}" = 1 ] && SLURM=()
# Optional: the browser the web tests and bench-web drive (they report
# SKIPPED without it). JIZHI_NO_BROWSER=1 leaves it out.
BROWSER=(chromium chromium-driver python3-selenium)
# Optional: the PyTorch peer for the trainer's tests and benchmarks.
OPTIONAL=(python3-torch)
[ "${JIZHI_NO_TORCH:-0}" = 1 ] && OPTIONAL=()
[ "${JIZHI_NO_BROWSER:-0}" = 1 ] && BROWSER=()

missing=()
for p in "${PKGS[@]}" "${SLURM[@]}" "${OPTIONAL[@]}" "${BROWSER[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
