"""The `jizhi` front (cli/main.c built with CLI_FRONT): the trial and report
commands run in a process that loads no GSL, OpenBLAS or curses (half of a
`trial set` process's time went to loading them and to OpenBLAS's thread,
docs/bench.md); every other command is handed to jizhi-core beside it."""
import os
import shutil
import subprocess

from conftest import BUILD, JIZHI

CORE = os.path.join(BUILD, "bin", "jizhi-core")


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                         check=True).stdout
    return [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]


def test_front_loads_no_numerics_or_curses():
    front = needed(JIZHI)
    assert any(n.startswith("libzmq") for n in front), front
    heavy = [n for n in front if n.startswith(("libgsl", "libopenblas", "libncurses", "libmpi",
                                               "libdnnl", "libgomp"))]
    assert heavy == [], heavy
    assert any(n.startswith("libopenblas") for n in needed(CORE))


def test_front_hands_other_commands_to_the_core(jz):
    for args in (["keygen", "--help"], ["study", "--help"], ["queue", "--help"]):
        a = jz.run(*args)
        b = subprocess.run([CORE, *args], cwd=jz.dir, env=jz.env, capture_output=True,
                           text=True, timeout=60)
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), args
    # a core command's errors and exit status come through unchanged
    p = jz.run("study", "list", "--db", os.path.join(jz.dir, "none.db"))
    assert p.returncode == 1 and "none.db" in p.stderr, p.stderr


def test_front_without_the_core_says_so(jz, tmp_path):
    lone = tmp_path / "bin"
    lone.mkdir()
    shutil.copy(JIZHI, lone / "jizhi")
    p = subprocess.run([str(lone / "jizhi"), "study", "list"], cwd=jz.dir, env=jz.env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "cannot run %s/jizhi-core" % lone in p.stderr and "jizhi study" in p.stderr, \
        p.stderr
    # the front's own commands still run: a usage error is its own
    p = subprocess.run([str(lone / "jizhi"), "trial", "list"], cwd=jz.dir, env=jz.env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "expected STUDY" in p.stderr, p.stderr
