"""`make bench` (bench/all.sh) fails when a benchmark fails: it runs
every benchmark, names the failures and exits 1, and exits 0 only when all
succeeded. The benchmarks here are stand-in make targets."""
import os
import subprocess

from conftest import ROOT

FAKE = """
ok-one:
\t@echo ran ok-one
broken:
\t@echo ran broken; exit 3
ok-two:
\t@echo ran ok-two
"""


def bench_all(tmp_path, names):
    mk = tmp_path / "Makefile.bench"
    mk.write_text(FAKE)
    env = dict(os.environ, BENCH_LIST=" ".join(names),
               BENCH_MAKE=f"make --no-print-directory -f {mk}")
    return subprocess.run([os.path.join(ROOT, "bench", "all.sh")], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_failing_benchmark_fails_the_run_and_the_others_still_run(tmp_path):
    p = bench_all(tmp_path, ["ok-one", "broken", "ok-two"])
    assert p.returncode == 1, p.stdout + p.stderr
    assert "ran ok-one" in p.stdout and "ran broken" in p.stdout and "ran ok-two" in p.stdout
    assert "bench: failed: broken (exit 2)" in p.stdout, p.stdout  # make's own exit status
    assert "1 of 3 benchmarks failed" in p.stdout


def test_all_benchmarks_passing_exit_0(tmp_path):
    p = bench_all(tmp_path, ["ok-one", "ok-two"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "bench: 2 benchmarks ran" in p.stdout


def test_every_bench_target_runs_files_that_are_in_bench():
    """Every benchmark lives under bench/ (none under scripts/ or
    schedulers/bench/), and each `make bench-*` target's recipe names only
    files that exist (make -n: nothing is built or run)."""
    import re
    tracked = subprocess.run(["git", "ls-files", "scripts", "schedulers"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked, "git ls-files found nothing"
    assert [f for f in tracked
            if f.startswith(("scripts/bench", "schedulers/bench/"))] == []
    mk = ""
    for f in ("Makefile", "schedulers/schedulers.mk", "trainer/trainer.mk", "web/web.mk"):
        if os.path.exists(os.path.join(ROOT, f)):
            mk += open(os.path.join(ROOT, f)).read()
    targets = sorted(set(re.findall(r"^(bench(?:-[a-z-]+)?):", mk, re.M)))
    assert "bench" in targets and "bench-bo" in targets and len(targets) >= 10, targets
    for t in targets:
        p = subprocess.run(["make", "-n", "--no-print-directory", t], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (t, p.stdout[-2000:], p.stderr[-2000:])
        for path in re.findall(r"(?<![\w/.-])((?:bench|scripts)/[\w.-]+\.(?:sh|py))", p.stdout):
            assert os.path.exists(os.path.join(ROOT, path)), (t, path)
