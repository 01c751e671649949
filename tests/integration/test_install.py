"""`make install`: what a new user gets. Installs into a temporary prefix,
builds a C trial with the installed pkg-config file alone (no
PKG_CONFIG_PATH tricks beyond the prefix, no LD_LIBRARY_PATH), runs a study
with the installed `jizhi`, imports the installed Python package, and
checks a DESTDIR staging install carries the final paths."""
import glob
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
    for f in ("bin/jizhi", "bin/jizhi-core", "bin/jizhi-train", "include/jizhi.h",
              "lib/libjizhi.a", "lib/pkgconfig/jizhi.pc", "lib/python3/dist-packages/jizhi/__init__.py"):
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
    # the front loads libjizhi for `report` from ../lib (no LD_LIBRARY_PATH):
    # outside a trial it prints the point, sends nothing and succeeds
    r = subprocess.run([str(prefix / "bin" / "jizhi"), "report", "loss=1"],
                       capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0 and "step 0 loss=1" in r.stderr, r.stderr
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


# ---- Debian's python3 finds what `make install` puts in place ---------------

DEBIAN_PY = "/usr/bin/python3"


def debian_sys_path():
    p = subprocess.run([DEBIAN_PY, "-I", "-c", "import sys, json; print(json.dumps(sys.path))"],
                       capture_output=True, text=True, env=clean_env(), check=True)
    return json.loads(p.stdout)


@pytest.mark.skipif(not os.path.exists(DEBIAN_PY), reason="no /usr/bin/python3")
def test_install_is_on_debian_python_path(tmp_path):
    """`make install` (PREFIX=/usr/local or /usr, staged with DESTDIR) puts the
    package in a folder Debian's python3 searches by default, and the staged
    tree imports with that folder alone."""
    usr = tmp_path / "usr"
    make("install", f"DESTDIR={usr}", "PREFIX=/usr")
    assert (usr / "usr/lib/python3/dist-packages/jizhi/__init__.py").exists()
    stage = tmp_path / "stage"
    make("install", f"DESTDIR={stage}", "PREFIX=/usr/local")
    inits = sorted((stage / "usr" / "local").glob("**/jizhi/__init__.py"))
    assert len(inits) == 1, inits
    pydir = "/" + str(inits[0].parent.parent.relative_to(stage))
    assert pydir in debian_sys_path(), pydir
    inst = (inits[0].parent / "_installed.py").read_text()
    assert '"/usr/local/lib/libjizhi.so.0"' in inst
    code = "import jizhi; t = jizhi.Trial(); print(t.param('lr', 0.5), jizhi.__file__)"
    env = clean_env(PYTHONPATH=str(stage) + pydir,
                    JIZHI_LIB=str(stage / "usr" / "local" / "lib" / "libjizhi.so.0"))
    p = subprocess.run([DEBIAN_PY, "-c", code], env=env, capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    lr, f = p.stdout.split()
    assert lr == "0.5" and f == str(inits[0])



# ---- pip install ./trial_helper/python in a fresh venv ----------------------

PKG = os.path.join(ROOT, "trial_helper", "python")
INDEX_DOWN = ("from versions: none", "NewConnectionError", "Failed to establish a new connection",
              "Temporary failure in name resolution", "Network is unreachable",
              "No matching distribution found for setuptools")


def tree(path):
    """Every path below `path` but __pycache__ (what another test's import
    may leave)."""
    out = set()
    for d, dirs, files in os.walk(path):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        out.update(os.path.relpath(os.path.join(d, x), path) for x in dirs + files)
    return out


def pip_install(venv, what, cwd):
    """A fresh venv of Debian's python3 with `what` pip-installed in it.
    With build isolation (setuptools from the index); when the index cannot
    be reached, again without it, the venv seeing Debian's setuptools."""
    subprocess.run([DEBIAN_PY, "-m", "venv", "--clear", str(venv)], check=True, env=clean_env())
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-cache-dir",
           "--disable-pip-version-check", "--timeout", "30"]
    p = subprocess.run(pip + [what], cwd=cwd, env=clean_env(), capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0 and any(s in p.stdout + p.stderr for s in INDEX_DOWN):
        subprocess.run([DEBIAN_PY, "-m", "venv", "--clear", "--system-site-packages", str(venv)],
                       check=True, env=clean_env())
        p = subprocess.run(pip + ["--no-build-isolation", "--no-index", what], cwd=cwd,
                           env=clean_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return venv / "bin" / "python"


SHOW = ("import jizhi; t = jizhi.Trial(); "
        "print(t.param('lr', 0.5), jizhi.__file__, jizhi.load_library()._name); t.close()")


def run_in(python, code, cwd, **env):
    p = subprocess.run([str(python), "-c", code], env=clean_env(**env), capture_output=True,
                       text=True, cwd=cwd, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


@pytest.fixture(scope="module")
def pip_venv(tmp_path_factory):
    """The package pip-installed from the source tree, and what pip left in
    the source tree."""
    if not os.path.exists(DEBIAN_PY):
        pytest.skip("no /usr/bin/python3")
    base = tmp_path_factory.mktemp("pipvenv")
    before = tree(PKG)
    python = pip_install(base / "venv", "./trial_helper/python", ROOT)
    return python, tree(PKG) - before


def test_pip_install_leaves_no_build_files_in_the_source_tree(pip_venv):
    _, new = pip_venv
    assert not new, sorted(new)


def test_pip_installed_package_carries_libjizhi(pip_venv, tmp_path):
    """No make install, no JIZHI_LIB, no LD_LIBRARY_PATH: the package loads the
    libjizhi it built; JIZHI_LIB still wins."""
    python, _ = pip_venv
    site = python.parent.parent
    lr, f, lib = run_in(python, SHOW, tmp_path)
    assert lr == "0.5"
    assert f.startswith(str(site)) and f.endswith("jizhi/__init__.py"), f
    assert lib == os.path.join(os.path.dirname(f), "libjizhi.so"), lib
    modules = sorted(os.path.basename(m) for m in glob.glob(os.path.join(PKG, "jizhi", "*.py")))
    assert modules == sorted(os.path.basename(m)
                             for m in glob.glob(os.path.join(os.path.dirname(f), "*.py"))
                             if not m.endswith("_installed.py"))
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    if nm.returncode == 0:
        syms = [l.split()[-1] for l in nm.stdout.splitlines() if l.strip()]
        assert syms and all(s.startswith("jz_") for s in syms), syms
    own = os.path.join(BUILD, "lib", "libjizhi.so")
    assert run_in(python, SHOW, tmp_path, JIZHI_LIB=own)[2] == own


def test_pip_installed_package_in_a_study(pip_venv, tmp_path):
    """A trial run by the venv's python under `jizhi run` talks to the
    controller through the package's own libjizhi."""
    python, _ = pip_venv
    (tmp_path / "obj.py").write_text(
        "import jizhi, os\n"
        "t = jizhi.Trial()\n"
        "x = t.param('x', 0.0)\n"
        "open('lib-%d.txt' % t.trial_id, 'w').write(jizhi.load_library()._name)\n"
        "for step in range(1, 4):\n"
        "    t.report(step, score=-(x - 0.3) ** 2 + step)\n"
        "t.close()\n")
    spec = {"name": "pip-trial", "objective": {"metric": "score", "mode": "max"},
            "scheduler": {"type": "random", "seed": 1}, "budget": {"trials": 2, "parallel": 1},
            "space": {"x": {"type": "float", "low": -1, "high": 1}},
            "trial": {"command": [str(python), str(tmp_path / "obj.py")], "timeout_s": 60,
                      "retries": 0}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = clean_env(JIZHI_HOME=str(tmp_path / "home"))
    r = subprocess.run([os.path.join(BUILD, "bin", "jizhi"), "run", "spec.json", "--db", "p.db"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 completed" in r.stdout, r.stdout
    libs = sorted(tmp_path.glob("**/lib-*.txt"))
    assert len(libs) == 2, libs
    site = str(python.parent.parent)
    for l in libs:
        assert l.read_text().startswith(site) and l.read_text().endswith("/jizhi/libjizhi.so")


def test_sdist_builds_and_installs_away_from_the_source_tree(tmp_path):
    """An sdist carries libjizhi's sources (csrc/), so pip builds it with no
    repository around it."""
    if not os.path.exists(DEBIAN_PY):
        pytest.skip("no /usr/bin/python3")
    if subprocess.run([DEBIAN_PY, "-c", "import setuptools"], capture_output=True).returncode:
        pytest.skip("no setuptools for /usr/bin/python3 (python3-setuptools)")
    before = tree(PKG)
    dist = tmp_path / "dist"
    dist.mkdir()
    p = subprocess.run([DEBIAN_PY, "-c",
                        "import sys; from setuptools import build_meta as b; "
                        "print(b.build_sdist(sys.argv[1]))", str(dist)],
                       cwd=PKG, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert tree(PKG) == before, sorted(tree(PKG) ^ before)
    sdist = dist / p.stdout.split()[-1]
    away = tmp_path / "away"
    away.mkdir()
    python = pip_install(tmp_path / "venv", str(sdist), away)
    lr, f, lib = run_in(python, SHOW, away)
    assert lr == "0.5" and f.startswith(str(tmp_path / "venv")), f
    assert lib == os.path.join(os.path.dirname(f), "libjizhi.so"), lib
