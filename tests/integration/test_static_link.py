"""libjizhi.a is self-contained: a C trial links it statically with only the
libraries pkg-config lists as private (-lzmq -ljansson -lm -pthread), its
only global symbols are jz_*, a program may define names the helper uses
inside (log_msg, wire_send, util_now) without a clash, and the statically
linked trial runs a study with `jizhi run`."""
import os
import subprocess


from conftest import BUILD, ROOT, Jizhi

LIBA = os.path.join(BUILD, "lib", "libjizhi.a")

CLASH = r"""
/* names libjizhi uses inside; a user's program may have its own */
int log_msg(void) { return 7; }
int wire_send(void) { return 8; }
double util_now(void) { return 9.0; }
int clash_check(void) { return log_msg() + wire_send() + (int)util_now(); }
"""


def build_static(tmp_path, extra=()):
    exe = tmp_path / "c-objective-static"
    cmd = ["cc", "-o", str(exe), os.path.join(ROOT, "examples", "c-objective.c"), *extra,
           "-I", os.path.join(ROOT, "trial_helper"), LIBA, "-lzmq", "-ljansson", "-lm",
           "-pthread"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return exe


def test_only_jz_symbols_are_global():
    assert os.path.exists(LIBA), "build libjizhi.a first (make)"
    out = subprocess.run(["nm", "-g", "--defined-only", LIBA], capture_output=True,
                         text=True, check=True).stdout
    names = [l.split()[-1] for l in out.splitlines() if len(l.split()) == 3]
    assert names, out
    assert all(n.startswith("jz_") for n in names), [n for n in names if not n.startswith("jz_")]
    assert "jz_open" in names and "jz_report" in names


def test_static_link_without_libjizhi_so(tmp_path):
    clash = tmp_path / "clash.c"
    clash.write_text(CLASH)
    exe = build_static(tmp_path, extra=[str(clash)])
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert "libjizhi" not in ldd, ldd
    env = {k: v for k, v in os.environ.items() if not k.startswith("JIZHI")}
    env.pop("LD_LIBRARY_PATH", None)
    p = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("score "), p.stdout


def test_static_trial_runs_a_study(tmp_path):
    exe = build_static(tmp_path)
    j = Jizhi(tmp_path)
    j.env.pop("JIZHI_LIB", None)
    spec = {"name": "static-c", "objective": {"metric": "score", "mode": "max"},
            "scheduler": {"type": "random", "seed": 3}, "budget": {"trials": 3, "parallel": 2},
            "space": {"x": {"type": "float", "low": -1, "high": 1},
                      "y": {"type": "float", "low": -1, "high": 1}},
            "trial": {"command": [str(exe)], "timeout_s": 60, "retries": 0}}
    j.write_spec(spec)
    r = j.run("run", "spec.json", "--db", j.db, timeout=180, check=0)
    assert "3 completed" in r.stdout, r.stdout
    rows = j.sql("SELECT COUNT(DISTINCT trial_id) FROM metrics WHERE name = 'score'")
    assert rows[0][0] == 3
