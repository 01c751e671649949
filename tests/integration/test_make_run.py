"""What `make run` does for a new user: installs only what building and the
example need (scripts/install-deps.sh --run), ends with a short table of
the best trials rather than a wide CSV (scripts/run-example.sh), and a PBT
example runs its whole population at once (`jizhi run` refuses --slots
below the population and, without --slots, gives it a slot per member)."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import BUILD, PROGS, ROOT, base_spec  # noqa: E402

DEPS = os.path.join(ROOT, "scripts", "install-deps.sh")


def deps(*args):
    return subprocess.run(["bash", DEPS, *args], capture_output=True, text=True, timeout=60)


def test_make_run_installs_only_what_the_example_needs():
    run = deps("--run", "--list")
    full = deps("--list")
    assert run.returncode == 0 and full.returncode == 0, run.stderr + full.stderr
    run_pkgs, all_pkgs = set(run.stdout.split()), set(full.stdout.split())
    for p in ("libzmq3-dev", "libsqlite3-dev", "dataset-fashion-mnist", "build-essential"):
        assert p in run_pkgs, p
    for p in ("chromium", "slurm-wlm", "python3-torch", "openmpi-bin", "python3-pytest"):
        assert p not in run_pkgs, p
        assert p in all_pkgs, p
    assert run_pkgs < all_pkgs
    bad = deps("--bogus")
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_make_run_waits_for_the_package_lock():
    text = open(DEPS).read()
    # apt-get update and install both wait for a held lock
    assert text.count('"${LOCK[@]}"') == 2 and "DPkg::Lock::Timeout" in text


def test_run_example_ends_with_a_short_table_of_the_best(tmp_path):
    env = dict(os.environ, BUILD=BUILD, JIZHI_RUNS=str(tmp_path),
               JIZHI_EXAMPLE="examples/python-objective.json",
               JIZHI_LIB=os.path.join(BUILD, "lib", "libjizhi.so"))
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "run-example.sh")], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "param_lr" not in out, "the wide CSV is back"
    lines = out.splitlines()
    head = next(i for i, l in enumerate(lines) if l.split()[:2] == ["TRIAL", "STATE"])
    rows = [l.split() for l in lines[head + 1:head + 6]]
    exp = subprocess.run([os.path.join(BUILD, "bin", "jizhi"), "study", "export",
                          "python-objective", "--db", str(tmp_path / "example.db"),
                          "--format", "json"], capture_output=True, text=True, cwd=ROOT)
    assert exp.returncode == 0, exp.stderr
    trials = json.loads(exp.stdout)
    trials = trials.get("trials", trials) if isinstance(trials, dict) else trials
    done = sorted((t for t in trials if isinstance(t.get("value"), float)),
                  key=lambda t: -t["value"])
    assert len(rows) == 5
    assert [int(r[0]) for r in rows] == [t["id"] for t in done[:5]]
    assert abs(float(rows[0][2]) - done[0]["value"]) < 1e-3 * abs(done[0]["value"])
    assert "trials: %d completed" % len(trials) in out


def pbt_spec(pop):
    spec = base_spec("pbt-slots", ["python3", os.path.join(PROGS, "formula_trial.py")],
                     trials=pop, parallel=pop)
    spec["objective"]["metric"] = "score"
    spec["scheduler"] = {"type": "pbt", "seed": 5, "interval": 10}
    spec["space"] = {"lr": {"type": "float", "low": 1e-4, "high": 10.0, "log": True}}
    spec["trial"]["env"] = {"FORMULA_STEPS": "20", "FORMULA_STEP_S": "0.02"}
    return spec


def test_pbt_run_refuses_fewer_slots_than_its_population(jz):
    p = jz.run("run", jz.write_spec(pbt_spec(4)), "--slots", "2")
    assert p.returncode == 1, p.stderr
    assert "--slots 2 is fewer than the PBT population of 4" in p.stderr
    assert not os.path.exists(jz.db) or jz.sql("SELECT count(*) FROM trials") == [(0,)]


def test_pbt_run_gives_its_population_a_slot_each(jz):
    pop = (os.cpu_count() or 1) + 1
    p = jz.run("run", jz.write_spec(pbt_spec(pop)), timeout=120)
    assert p.returncode == 0, p.stderr
    assert "PBT population of %d runs at once on %d slots" % (pop, pop) in p.stderr
    # every member was started before any finished: the population met
    rows = jz.sql("SELECT started, ended FROM trials")
    assert len(rows) == pop
    assert max(r[0] for r in rows) < min(r[1] for r in rows), rows


def test_make_run_example_end_to_end_in_a_short_mode(tmp_path):
    """`make run`'s own study (examples/fmnist.json: BO + ASHA over
    jizhi-train on Fashion-MNIST) end to end through scripts/run-example.sh,
    in its short mode (JIZHI_EXAMPLE_SHORT=3: 3 trials on 2000 examples for
    2 epochs): it finishes, prints its table, and the best trial learned
    (val_acc 0.77 here; chance is 0.1)."""
    if not os.path.exists(os.path.join(BUILD, "bin", "jizhi-train")):
        pytest.skip("jizhi-train is not built")
    if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        pytest.skip("Fashion-MNIST is not installed (dataset-fashion-mnist)")
    env = dict(os.environ, BUILD=BUILD, JIZHI_RUNS=str(tmp_path), JIZHI_EXAMPLE_SHORT="3",
               PATH=os.path.join(BUILD, "bin") + os.pathsep + os.environ["PATH"])
    env.pop("JIZHI_EXAMPLE", None)
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "run-example.sh")], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "jizhi run " + str(tmp_path / "fmnist-short.json") in p.stdout, p.stdout
    assert "study fmnist-bo: finished, 3 trials" in p.stdout, p.stdout
    lines = p.stdout.splitlines()
    head = next(i for i, l in enumerate(lines) if l.split()[:2] == ["TRIAL", "STATE"])
    rows = [l.split() for l in lines[head + 1:] if l.strip() and l.split()[0].isdigit()]
    assert 1 <= len(rows) <= 3, p.stdout
    assert float(rows[0][2]) > 0.6, p.stdout  # the best val_acc
    # the short mode changed the budget and the data, nothing else
    short = json.load(open(tmp_path / "fmnist-short.json"))
    full = json.load(open(os.path.join(ROOT, "examples", "fmnist.json")))
    assert short["budget"]["trials"] == 3 and short["space"] == full["space"]
    assert short["trial"]["command"][:len(full["trial"]["command"])] == full["trial"]["command"]
