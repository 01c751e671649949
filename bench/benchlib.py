"""bench/benchlib.py - what the scheduler benches share (not a bench itself:
bench/schedulers.sh runs only bench/schedulers_*): a virtual environment of
pinned PyPI packages for a peer (Ray Tune, AdaptDL), the replicas of an arm,
and the merge of a part's medians into $BENCH_SCHED_JSON."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_dir():
    """$BUILD (default build), a relative one taken from the repository root."""
    build = os.environ.get("BUILD", "build")
    return build if os.path.isabs(build) else os.path.join(ROOT, build)


def jizhi_env(build, **extra):
    """The environment for the jizhi commands a bench starts: build/bin first
    on PATH, no JIZHI_* variables of the caller's (the bench starts its own
    daemons), and `extra` set."""
    e = dict(os.environ)
    e["PATH"] = os.path.join(build, "bin") + os.pathsep + e.get("PATH", "")
    for k in list(e):
        if k.startswith("JIZHI_"):
            del e[k]
    e.update(extra)
    return e


# replica k of an arm runs at its rate x (1 + JITTER k), k = 0, -1, 1, -2, 2, ...:
# one trial's time to a target is chaotic (docs/bench.md, stop 32)
JITTER = 1e-4


def replica_factor(i):
    """The rate factor of the i-th replica (i = 0, 1, 2, ...)."""
    k = (i + 1) // 2 * (-1 if i % 2 else 1)
    return 1 + JITTER * k, k


def median_replica(reps, key):
    """The replica with the median reps[...][key] (None, a miss, counts as the
    slowest), with every replica's value in "replicas"; None without any."""
    if not reps:
        return None
    reps = sorted(reps, key=lambda r: (r[key] is None, r[key] or 0))
    mid = dict(reps[(len(reps) - 1) // 2])
    mid["replicas"] = [r[key] for r in reps]
    return mid


def ensure_venv(venv, pins, probe, what, install=True):
    """The python of venv (made with the system's packages, so its numpy and
    torch) once `probe` (python code) runs in it, installing pins first if
    needed and `install`; or (None, why)."""
    py = os.path.join(venv, "bin", "python")
    check = [py, "-c", probe]
    if os.path.exists(py) and subprocess.run(check, capture_output=True).returncode == 0:
        return py, None
    if not install:
        return None, "%s not installed in %s" % (" ".join(pins), venv)
    print("%s: installing %s into %s (once)" % (what, " ".join(pins), venv))
    sys.stdout.flush()
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, "cannot create a venv: " + r.stderr.strip()[-300:]
    try:
        import numpy
        cons = ["numpy==" + numpy.__version__]  # the system's torch is built against it
    except ImportError:
        cons = []
    cfile = os.path.join(venv, "constraints.txt")
    with open(cfile, "w") as f:
        f.write("\n".join(cons) + "\n")
    r = subprocess.run([py, "-m", "pip", "install", "-q", "-c", cfile] + pins,
                       capture_output=True, text=True)
    if r.returncode != 0 or subprocess.run(check, capture_output=True).returncode != 0:
        return None, "pip install of %s failed: %s" % (
            " ".join(pins), (r.stderr or r.stdout).strip()[-300:])
    return py, None


def write_json(path, key, value):
    """Merges {key: value} into the JSON object at path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    doc[key] = value
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)
