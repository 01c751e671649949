"""`make install`: what a new user gets. Installs into a temporary prefix,
builds a C trial with the installed pkg-config file alone (no
PKG_CONFIG_PATH tricks beyond the prefix, no LD_LIBRARY_PATH), runs a study
with the installed `jizhi`, imports the installed Python package, and
checks a DESTDIR staging install carries the final paths."""
import json
import os
import subprocess

import pytest

from conftest import BUILD, ROOT


def make(*args):
    p = subprocess.run(["make", "--no-print-directory", f"BUILD={BUILD}", *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JIZHI") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix")
    make("install", f"PREFIX={p}")
    return p


def test_install_layout_and_version(prefix):
    for f in ("bin/jizhi", "bin/jizhi-train", "include/jizhi.h", "lib/libjizhi.a",
              "lib/pkgconfig/jizhi.pc", "lib/python3/dist-packages/jizhi/__init__.py"):
        assert (prefix / f).exists(), f
    so = prefix / "lib" / "libjizhi.so"
    assert so.is_symlink()
    dyn = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    soname = [l for l in dyn.splitlines() if "SONAME" in l][0]
    assert "libjizhi.so.0" in soname
    assert (prefix / "lib" / "libjizhi.so.0").exists()
    v = subprocess.run([str(prefix / "bin" / "jizhi"), "--version"], capture_output=True,
                       text=True, env=clean_env())
    assert v.returncode == 0
    with open(os.path.join(ROOT, "trial_helper", "jizhi.h")) as f:
        header_version = [l.split('"')[1] for l in f if l.startswith("#define JZ_VERSION")][0]
    assert v.stdout.strip() == f"jizhi {header_version}"
    pc = (prefix / "lib" / "pkgconfig" / "jizhi.pc").read_text()
    assert f"libdir={prefix}/lib" in pc and f"includedir={prefix}/include" in pc


def test_c_trial_built_with_pkg_config_runs_in_a_study(prefix, tmp_path):
    env = clean_env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "jizhi"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    exe = tmp_path / "c-objective"
    subprocess.run(["cc", "-o", str(exe), os.path.join(ROOT, "examples", "c-objective.c"),
                    *flags], check=True, env=env)
    # runs without LD_LIBRARY_PATH, standalone
    p = subprocess.run([str(exe)], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("score ")
    spec = {"name": "c-trial", "objective": {"metric": "score", "mode": "max"},
            "scheduler": {"type": "random", "seed": 1}, "budget": {"trials": 3, "parallel": 1},
            "space": {"x": {"type": "float", "low": -1, "high": 1},
                      "y": {"type": "float", "low": -1, "high": 1}},
            "trial": {"command": [str(exe)], "timeout_s": 60, "retries": 0}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = clean_env(PATH=str(prefix / "bin") + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["jizhi", "run", "spec.json", "--db", "c.db"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 completed" in r.stdout, r.stdout


def test_installed_python_package_finds_the_library(prefix, tmp_path):
    code = ("import jizhi; t = jizhi.Trial(); print(t.param('lr', 0.5)); "
            "print(jizhi.__file__)")
    env = clean_env(PYTHONPATH=str(prefix / "lib" / "python3" / "dist-packages"))
    p = subprocess.run(["python3", "-c", code], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert lines[0] == "0.5"
    assert lines[1].startswith(str(prefix))


def test_destdir_stages_the_final_paths(tmp_path):
    stage = tmp_path / "stage"
    make("install", f"DESTDIR={stage}", "PREFIX=/opt/jz")
    pc = (stage / "opt" / "jz" / "lib" / "pkgconfig" / "jizhi.pc").read_text()
    assert "libdir=/opt/jz/lib" in pc and str(stage) not in pc
    assert (stage / "opt" / "jz" / "bin" / "jizhi").exists()
    inst = (stage / "opt/jz/lib/python3/dist-packages/jizhi/_installed.py").read_text()
    assert "/opt/jz/lib/libjizhi.so.0" in inst and str(stage) not in inst
