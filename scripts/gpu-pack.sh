#!/usr/bin/env bash
# gpu-pack.sh - what scripts/gpu-check.sh needs on a GPU machine that has
# CUDA, PyTorch and NVIDIA's wheels (cuDNN, NCCL, cuBLAS) but none of this
# build's Debian packages and no network (the image of the GPU machines lent
# to this project). Run here, after `make` and `make cuda`; writes PACK
# (default .gpu, ignored by git):
#   payload.tar.xz  libexec/: jizhi-train, jizhi-train-cuda, jizhi and
#              jizhi-core (what `jizhi run` hands its work to) as built here; lib/: every shared library they load, as ldd
#              resolves it here, except glibc's, libstdc++, libgcc_s and
#              CUDA's own (the machine's, or its wheels'); gpu-check.sh
#              --pack unpacks it in place
#   bin/       one launcher per binary: sets LD_LIBRARY_PATH to the pack's
#              lib/, then the folders in the file cuda-libs beside bin/ (the
#              wheels' folders, which gpu-check.sh writes there), for that
#              program and what it starts (jizhi's trials), so PyTorch's
#              processes keep the machine's own libraries
#   data/      Fashion-MNIST's four files (gpu-check.sh links them where
#              the trainer and the benches look when that folder is absent)
#   MANIFEST   the commit, the files and their sizes
# Then, on the GPU machine: scripts/gpu-check.sh --pack .gpu (the device
# call carries .gpu). Exit 1, with the reason, when a binary is missing,
# a library does not resolve here, or the pack and the working tree's files
# (tracked, and untracked ones git does not ignore) together exceed
# TRAVEL_MAX_MB (60: the device call carries both under a 64 MiB limit).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PACK=${PACK:-.gpu}
TRAVEL_MAX_MB=${TRAVEL_MAX_MB:-60}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
BINS=(jizhi-train jizhi-train-cuda jizhi jizhi-core)
# provided by the GPU machine: glibc's libraries and the loader, the C++
# runtime, and CUDA's (the driver's libcuda; cudart, cuBLAS and NCCL from the
# toolkit or the wheels)
MACHINE_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libnsl|libutil|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'

die() {
    echo "gpu-pack: $*" >&2
    exit 1
}
for b in "${BINS[@]}"; do
    [ -x "$BUILD/bin/$b" ] || die "$BUILD/bin/$b is missing (build it first: make && make cuda)"
done
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
    t10k-labels-idx1-ubyte.gz; do
    [ -r "$DATA/$f" ] || die "$DATA/$f is missing (install dataset-fashion-mnist or set DATA)"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/libexec" "$tmp/bin" "$tmp/lib" "$tmp/data"
for b in "${BINS[@]}"; do
    cp "$BUILD/bin/$b" "$tmp/libexec/"
    cat > "$tmp/bin/$b" <<'EOF'
#!/bin/sh
# the pack's launcher (scripts/gpu-pack.sh): the binary with the pack's libraries
d=$(dirname "$(readlink -f "$0")")/..
c=""
[ -r "$d/cuda-libs" ] && { read -r c || true; } < "$d/cuda-libs"
LD_LIBRARY_PATH="$d/lib${c:+:$c}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    exec "$d/libexec/$(basename "$0")" "$@"
EOF
    chmod 755 "$tmp/bin/$b"
done
# every library ldd resolves for the binaries, less the machine's own
ldd "${BINS[@]/#/$BUILD/bin/}" > "$tmp/ldd" 2>&1 || true
if grep -q "not found" "$tmp/ldd"; then
    die "libraries that do not resolve here: $(grep 'not found' "$tmp/ldd" | awk '{print $1}' | sort -u | tr '\n' ' ')"
fi
awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' "$tmp/ldd" | sort -u | while read -r name path; do
    if ! echo "$name" | grep -Eq "$MACHINE_LIBS"; then
        cp -L "$path" "$tmp/lib/$name"
    fi
done
ls "$tmp/lib" > "$tmp/libs"
XZ_OPT=${XZ_OPT:--6 -T0} tar -C "$tmp" -cJf "$tmp/payload.tar.xz" libexec lib
cp "$DATA"/*-ubyte.gz "$tmp/data/"
{
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built on $(uname -n) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "libraries packed (payload.tar.xz, lib/): $(tr '\n' ' ' < "$tmp/libs")"
    echo "left to the machine: $(awk '$2 == "=>" {print $1}' "$tmp/ldd" | sort -u |
        grep -E "$MACHINE_LIBS" | tr '\n' ' ')"
} > "$tmp/MANIFEST"
rm -rf "$tmp/lib" "$tmp/libexec" "$tmp/ldd" "$tmp/libs"
kb=$(du -sk "$tmp" | cut -f1)
# what travels beside it: tracked files and untracked ones git does not ignore
tree=$(git ls-files -z -co --exclude-standard 2>/dev/null | du -ck --files0-from=- 2>/dev/null |
    tail -1 | cut -f1)
[ $((kb + ${tree:-0})) -le $((TRAVEL_MAX_MB * 1024)) ] ||
    die "the pack ($((kb / 1024)) MB) and the working tree's files ($((${tree:-0} / 1024)) MB) are over TRAVEL_MAX_MB ($TRAVEL_MAX_MB)"
(cd "$tmp" && find . -type f -printf '%P %s\n' | sort) >> "$tmp/MANIFEST"
rm -rf "$PACK"
mkdir -p "$(dirname "$PACK")"
cp -a "$tmp" "$PACK"
echo "gpu-pack: $PACK ($((kb / 1024)) MB; with the working tree $(((kb + ${tree:-0}) / 1024)) MB): on the GPU machine, scripts/gpu-check.sh --pack $PACK"
