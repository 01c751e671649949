"""The GEMM library bench's harness computes right (`make bench-gemm`,
bench/gemm_libs.py, docs/bench.md): each library's result of every shape's
operation at a small size (same transposes, leading dimensions padded
where the real ones are, beta, the GP's Cholesky/trsm/syrk in double)
against a double reference, one library per test, skipped with the
worker's reason where a library is absent. And the check can fail: with
GEMM_LIBS_FAULT=1 the workers add 1 to one output value and the check
must name the shapes and exit 1. No timing is asserted."""
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT

WORKER = os.path.join(BUILD, "bench", "gemm_libs")
DRIVER = os.path.join(ROOT, "bench", "gemm_libs.py")


@pytest.fixture(scope="module")
def worker():
    if not os.path.exists(WORKER):
        subprocess.run(["make", "--no-print-directory", f"BUILD={BUILD}", WORKER], cwd=ROOT,
                       check=True, capture_output=True, timeout=120)
    return WORKER


# the worker's and the driver's reasons for a library that is absent
ABSENT = (r" skipped: (.* not loadable \(|built without oneDNN|no PyTorch in |cannot run )")


def _expected(lib):
    """Shapes checked per library: every fp32 shape (MLP 16, CNN 11); the
    GP's double shapes where the library has them (BLIS and PyTorch 12,
    OpenBLAS 15 with its own dpotrf)."""
    if lib.startswith("openblas-"):
        return 42
    if lib.startswith("blis") or lib == "torch":
        return 39
    return 27  # oneDNN (fp32 and bf16), PyTorch bf16


def _pick(worker):
    return subprocess.run([worker, "--pick"], capture_output=True, text=True,
                          timeout=10).stdout.strip()


def _check(libs, **env):
    e = dict(os.environ, BUILD=BUILD, **env)
    return subprocess.run([sys.executable, DRIVER, "--check", "--libs", libs], cwd=ROOT,
                          env=e, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("lib", ["openblas-pick", "openblas-Prescott", "blis", "blis-skx",
                                 "dnnl-sgemm", "dnnl-matmul", "dnnl-bf16", "torch",
                                 "torch-bf16"])
def test_each_library_matches_a_double_reference(worker, lib):
    pick = _pick(worker)
    if lib == "openblas-pick":
        if pick == "none":
            pytest.skip("cpuid names no OpenBLAS core for this CPU (not x86-64)")
        lib = f"openblas-{pick}"
    if lib == "blis-skx" and pick not in ("SkylakeX", "Cooperlake"):
        pytest.skip(f"BLIS's skx kernels need AVX-512 (this CPU: {pick})")
    p = _check(lib)
    out = p.stdout + p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.startswith(lib + " ")]
    assert len(line) == 1, out
    if " skipped: " in line[0]:
        # only a library that is not there skips; any other reason fails
        assert re.search(ABSENT, line[0]), out
        pytest.skip(line[0].strip())
    assert p.returncode == 0 and " ok: " in line[0], out
    n = int(line[0].split(" ok: ")[1].split()[0])
    assert n == _expected(lib), out


def test_a_wrong_value_fails_the_check(worker):
    """One value off by 1 in the C worker's and in PyTorch's results."""
    p = _check(f"openblas-Prescott,torch", GEMM_LIBS_FAULT="1")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    for lib in ("openblas-Prescott", "torch"):
        line = [ln for ln in p.stdout.splitlines() if ln.startswith(lib + " ")]
        if line and " skipped: " in line[0]:
            continue
        assert len(line) == 1 and "FAILED" in line[0] and "mlp128/784-256.fwd" in line[0], out
