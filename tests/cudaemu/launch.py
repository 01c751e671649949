#!/usr/bin/env python3
"""launch.py SRC DST - cudaemu's one source rewrite (tests/cudaemu/README.md).

g++ does not know nvcc's launch syntax, so every `kernel<<<grid, block,
shm, stream>>>(args)` in SRC becomes `emu_launch(kernel, "kernel", grid,
block, shm, stream)(args)` in DST (include/cuda_runtime.h runs it on the
CPU). Nothing else changes, and the line numbers stay the same.
"""
import re
import sys

LAUNCH = re.compile(
    r"([A-Za-z_]\w*(?:\s*<[^<>;(){}]*>)?)\s*<<<(.*?)>>>\s*\(", re.DOTALL)


def rewrite(text):
    def one(m):
        name = " ".join(m.group(1).split())
        # the newlines inside the match are kept, after it, to keep line numbers
        lines = m.group(0).count("\n")
        return 'emu_launch(%s, "%s", %s)(' % (m.group(1), name, " ".join(
            m.group(2).split())) + "\n" * lines
    out = LAUNCH.sub(one, text)
    if "<<<" in out:
        sys.exit("launch.py: a launch it cannot read is left in the file")
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: launch.py SRC DST")
    with open(sys.argv[1]) as f:
        text = f.read()
    out = rewrite(text)
    with open(sys.argv[2], "w") as f:
        f.write('#line 1 "%s"\n' % sys.argv[1])
        f.write(out)


if __name__ == "__main__":
    main()
