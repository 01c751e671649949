"""Optuna's side of the ingest benchmark: intermediate values reported with
trial.report() into an SQLite storage, points per second."""
import os
import sys
import tempfile
import time

try:
    import optuna
except ImportError:
    print("optuna: not installed (pip install optuna) - skipped")
    sys.exit(0)

optuna.logging.set_verbosity(optuna.logging.WARNING)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
with tempfile.TemporaryDirectory() as d:
    storage = f"sqlite:///{os.path.join(d, 'optuna.db')}"
    study = optuna.create_study(storage=storage, study_name="ingest")
    trial = study.ask()
    t0 = time.perf_counter()
    for step in range(n):
        trial.report(1.0 / (step + 1), step)
    dt = time.perf_counter() - t0
    print(f"optuna {optuna.__version__}: {n} points in {dt:.2f} s = {n / dt:.0f} points/s")
