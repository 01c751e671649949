"""The trainer's sources under clang: the fuzz build (Makefile, fuzz_ckpt)
compiles every trainer/*.c but main.c with clang, which ignores GCC-only
attributes with a warning, and then builds what they guard for the
baseline (review10 item 8: optim.c's optimize("fp-contract=off"),
kernels_nhwc.c's prefer-vector-width=512 target). Every file must pass
clang's syntax check without a warning. Skipped without clang."""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_trainer_sources_compile_under_clang_without_warnings():
    clang = shutil.which("clang")
    if not clang:
        pytest.skip("clang is not installed (the fuzz build needs it)")
    blas = [d for d in ("/usr/include/x86_64-linux-gnu/openblas-pthread",
                        "/usr/include/aarch64-linux-gnu/openblas-pthread",
                        "/usr/include/openblas") if os.path.isdir(d)]
    pkg = subprocess.run(["pkg-config", "--cflags", "libzmq", "jansson", "sqlite3", "gsl",
                          "libsodium"], capture_output=True, text=True).stdout.split()
    srcs = sorted(f for f in glob.glob(os.path.join(ROOT, "trainer", "*.c"))
                  if not f.endswith("/main.c"))
    assert srcs
    p = subprocess.run([clang, "-fsyntax-only", "-std=gnu11", "-Werror", "-I" + ROOT,
                        "-I" + os.path.join(ROOT, "trial_helper"),
                        *["-I" + d for d in blas[:1]], *pkg, *srcs],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
