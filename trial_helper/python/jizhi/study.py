"""jizhi.study - ask-and-tell and optimize from Python (docs/python.md).

    import jizhi
    study = jizhi.create_study("spec.json", db="jizhi.db")   # or a dict
    trial = study.ask()                  # trial.params, trial.id
    trial.report(step, loss=...)         # live: early stopping, trial set
    if trial.should_stop(): ...
    study.tell(trial, value)             # or values=[...], state="failed"
    study.optimize(fn, n_trials=20, n_jobs=4)
    study.best_trial, study.best_params, study.trials

A study made here is an ordinary jizhi study on the same controller and
database as every other (study show, watch, the page, exports): its spec has
no `trial` section, so the controller never starts trials on a dispatcher;
this program asks for them. Without `controller=`, the controller serving
`db` is used, or one is started as a child process for as long as this
program runs (so a notebook needs no daemon). Requests go through the
`jizhi` command (JIZHI_BIN, else the build next to this package, else
PATH); each asked trial reports through libjizhi (jz_open_as).
"""

import atexit
import ctypes
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from . import JizhiError, Trial, _b, _open_trials, load_library

__all__ = ["Study", "AskedTrial", "TrialPruned", "create_study", "load_study"]


class TrialPruned(Exception):
    """Raise it inside an optimize() objective to end the trial as pruned
    (Optuna's optuna.TrialPruned)."""


def _jizhi_bin():
    env = os.environ.get("JIZHI_BIN")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.normpath(os.path.join(here, "..", "..", "..", "build", "bin", "jizhi"))
    if os.access(built, os.X_OK):
        return built
    found = shutil.which("jizhi")
    if found:
        return found
    raise JizhiError("jizhi: cannot find the `jizhi` command; set JIZHI_BIN to its path")


_children = []


@atexit.register
def _stop_children():
    for p in _children:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def _die_with_parent():
    # the embedded controller ends with this program even when it is killed
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class _Cli:
    """Runs `jizhi` for one database or controller."""

    def __init__(self, db, controller, server_key=None):
        self.bin = _jizhi_bin()
        self.db = os.path.abspath(db)
        self.controller = controller
        self.env = dict(os.environ)
        if server_key:
            self.env["JIZHI_SERVER_KEY"] = server_key
            # the asked trials' helper connections read it from this process
            os.environ["JIZHI_SERVER_KEY"] = server_key

    def run(self, args, tail=(), check=True):
        cmd = [self.bin] + list(args) + ["--db", self.db]
        if self.controller:
            cmd += ["--controller", self.controller]
        if tail:
            cmd += ["--"] + [str(a) for a in tail]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=self.env, universal_newlines=True)
        if check and p.returncode != 0:
            msg = p.stderr.strip() or p.stdout.strip()
            if msg.startswith("jizhi: "):
                msg = msg[len("jizhi: "):]
            # the CLI's flag, in this API's terms
            msg = msg.replace("pass --controller ENDPOINT", "pass controller=ENDPOINT")
            raise JizhiError("jizhi: %s" % (msg or "`%s` failed (exit %d)"
                                            % (" ".join(args), p.returncode)))
        return p

    def json(self, args):
        return json.loads(self.run(list(args) + ["--json"]).stdout)

    def alive(self):
        return self.run(["queue"], check=False).returncode == 0

    def ensure_controller(self, timeout=30):
        """Embedded: a controller serving db, started as a child when none
        answers. Returns the child (subprocess.Popen) or None."""
        if self.controller or self.alive():
            return None
        log = open(self.db + ".controller.log", "ab")
        p = subprocess.Popen([self.bin, "controller", "--db", self.db], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=log, env=self.env, preexec_fn=_die_with_parent)
        log.close()
        _children.append(p)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise JizhiError("jizhi: the embedded controller exited (status %d); see %s"
                                 % (p.returncode, self.db + ".controller.log"))
            if os.path.exists(self.db + ".endpoint") and self.alive():
                return p
            time.sleep(0.05)
        raise JizhiError("jizhi: the embedded controller did not answer within %g s" % timeout)


class AskedTrial(Trial):
    """A trial asked with Study.ask(): .id, .number, .params (live: a
    `trial set` is applied at the next poll or should_stop), report(step,
    **metrics), poll(), should_stop(). Study.tell ends it."""

    def __init__(self, study, info):
        self._lib = load_library()
        lib = self._lib
        if not hasattr(lib, "_jz_open_as"):
            fn = lib.jz_open_as
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_char_p, ctypes.c_char_p,
                           ctypes.c_char_p]
            lib._jz_open_as = fn
        self.study = study
        self.id = int(info["trial"])
        self.number = int(info["number"])
        self._stop = False
        endpoint = study._cli.controller or info["endpoint"]
        params = json.dumps(info["params"], sort_keys=True, separators=(",", ":"))
        h = lib._jz_open_as(_b(endpoint), self.id, _b(info["token"]), _b(params),
                            _b(info.get("checkpoint_dir") or "."))
        if not h:
            raise JizhiError("jizhi: cannot open trial %d (see the message above)" % self.id)
        self._h = ctypes.c_void_p(h)
        _open_trials.add(self)

    def poll(self):
        for ins in super().poll():
            if ins.kind == "stop":
                self._stop = True
            yield ins

    def should_stop(self):
        """True once the controller asked this trial to stop: early stopping
        (ASHA, Hyperband, median, the guard), a person's `trial stop` or the
        study's. Optuna's should_prune. Other instructions (set) are applied
        to .params on the way."""
        for _ in self.poll():
            pass
        return self._stop

    should_prune = should_stop

    def suggest(self, name, *args, **kwargs):
        """The value the study's space chose for `name` (the space is the
        spec's; the arguments of Optuna's suggest_* are not needed)."""
        return self.params[name]

    suggest_float = suggest_int = suggest_categorical = suggest

    def __repr__(self):
        return "<jizhi.AskedTrial id=%d params=%r>" % (self.id, self.params if self._h else {})


class Study:
    """An ask-and-tell study (create_study, load_study)."""

    def __init__(self, name, cli, child=None):
        self.study_name = self.name = name
        self._cli = cli
        self._child = child

    def ask(self, timeout=60):
        """A new trial from the study's scheduler (an AskedTrial)."""
        info = self._cli.json(["trial", "ask", self.name, "--timeout", str(timeout)])
        return AskedTrial(self, info)

    def tell(self, trial, value=None, values=None, state=None, message=None):
        """Ends `trial` (an AskedTrial or its id): with its objective
        `value` (or `values`, one per objective), or state="failed" or
        "pruned" (message: why, kept as the trial's reason). Returns
        {trial, state, value}. Raises
        JizhiError when the controller refuses (an unknown, ended or
        another user's trial)."""
        tid = trial.id if isinstance(trial, AskedTrial) else int(trial)
        if isinstance(trial, AskedTrial):
            trial.close()  # its reports are stored before it ends
        if value is not None and values is not None:
            raise ValueError("jizhi: give value or values, not both")
        if value is not None:
            values = [value]
        if state == "failed" and values is not None:
            raise ValueError("jizhi: a failed trial has no value (pass message= to say why)")
        if state not in ("failed", "pruned") and values is None:
            raise ValueError("jizhi: tell needs the trial's value (or values), or "
                             "state='failed' or 'pruned'")
        tail = [tid]
        if state in ("failed", "pruned"):
            tail.append(state)
        elif state not in (None, "completed"):
            raise ValueError("jizhi: state must be 'completed', 'failed' or 'pruned'")
        for v in values or []:
            try:
                tail.append(repr(float(v)))
            except (TypeError, ValueError):
                raise ValueError("jizhi: value must be a number, not %r" % (v,))
        if message and state in ("failed", "pruned"):
            tail.append(str(message)[:1000])  # `trial tell ID pruned [VALUE...] [MESSAGE]`
        return json.loads(self._cli.run(["trial", "tell", "--json"], tail=tail).stdout)

    def optimize(self, func, n_trials=None, n_jobs=1, catch=True):
        """Asks, runs func(trial) and tells, n_trials times (default: what
        is left of the budget), n_jobs at a time (threads). func returns the
        objective (a list for several objectives); raising TrialPruned ends
        the trial as pruned, any other exception as failed with its message
        (re-raised after telling when catch is False). An ask the
        controller refuses (the budget used up, the study stopped) ends the
        loop and raises JizhiError once the running trials are told."""
        if n_trials is None:  # the budget with its extensions (`study extend`)
            s = [e for e in self._cli.json(["study", "list"]) if e["name"] == self.name]
            if not s:
                raise JizhiError("jizhi: study %s: no such study" % self.name)
            n_trials = max(0, int(s[0]["budget"]) - int(s[0]["trials"]))
        left = [int(n_trials)]
        lock = threading.Lock()
        errors = []

        def worker():
            while True:
                with lock:
                    if left[0] <= 0 or errors:
                        return
                    left[0] -= 1
                try:
                    trial = self.ask()
                except JizhiError as e:  # the budget is used up, the study stopped
                    with lock:
                        errors.append(e)
                    return
                try:
                    v = func(trial)
                except TrialPruned as e:
                    self.tell(trial, state="pruned", message=str(e) or None)
                    continue
                except Exception as e:
                    self.tell(trial, state="failed", message="%s: %s" % (type(e).__name__, e))
                    if not catch:
                        with lock:
                            errors.append(e)
                    continue
                if isinstance(v, (list, tuple)):
                    self.tell(trial, values=list(v))
                else:
                    self.tell(trial, v)

        threads = [threading.Thread(target=worker) for _ in range(max(1, int(n_jobs)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def set(self, trial, guard=False, watch_steps=None, tolerance=None, force=False,
            timeout=None, **values):
        """Changes a running trial's values live (`jizhi trial set`):
        study.set(trial_id, lr=0.4). With guard=True the change is guarded
        (`--guard`): the trial checkpoints, takes the change, and its next
        `watch_steps` reports (5) are watched; a loss jump, a NaN or a trend
        worse than before by more than `tolerance` (0.2) reverts it from the
        checkpoint with the old values. guard="values": the same for a
        program that cannot checkpoint (the old values come back, the steps
        made stay). A guarded call waits for the outcome (timeout: seconds,
        600 by default) and returns a dict: outcome ("kept", "reverted",
        "ended" or "failed"), kept (bool), reason (in words), values (the
        change), old (the values before), evidence (the reports before and
        in the window, for a revert the one that tripped), trial and
        intervention. An unguarded call returns {outcome: "sent", message}.
        Raises JizhiError when the controller refuses (unknown parameter,
        value out of the space without force=True, an ended trial, a
        program without checkpoints asked for guard=True) or no answer
        comes within the timeout."""
        tid = trial.id if isinstance(trial, AskedTrial) else int(trial)
        if guard not in (False, True, "values"):
            raise ValueError("jizhi: guard must be False, True or 'values'")
        if (watch_steps is not None or tolerance is not None) and not guard:
            raise ValueError("jizhi: watch_steps and tolerance go with guard")
        if not values:
            raise ValueError("jizhi: set needs at least one value, e.g. lr=0.4")
        args = ["trial", "set", str(tid)]
        for k, v in values.items():
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise ValueError("jizhi: %s: a number or a string, not %r" % (k, v))
            args.append("%s=%s" % (k, repr(float(v)) if isinstance(v, float) else v))
        if force:
            args.append("--force")
        if guard:
            args.append("--guard=values" if guard == "values" else "--guard")
            if watch_steps is not None:
                args += ["--watch-steps", str(int(watch_steps))]
            if tolerance is not None:
                args += ["--tolerance", repr(float(tolerance))]
            args.append("--json")
        if timeout is not None:
            args += ["--timeout", str(timeout)]
        if not guard:
            return {"outcome": "sent", "message": self._cli.run(args).stdout.strip()}
        # a revert exits 1 with its outcome: read the answer before the status
        p = self._cli.run(args, check=False)
        try:
            r = json.loads(p.stdout)
        except ValueError:
            r = None
        if not isinstance(r, dict) or "guard" not in r:
            msg = (p.stderr.strip() or p.stdout.strip()).replace("jizhi: ", "", 1)
            raise JizhiError("jizhi: %s" % (msg or "trial set failed (exit %d)"
                                            % p.returncode))
        out = {"outcome": r["guard"], "kept": r["guard"] == "kept"}
        for k in ("reason", "values", "old", "evidence", "trial", "intervention"):
            if k in r:
                out[k] = r[k]
        return out

    def fork(self, trial, *siblings, steps=None, keep="best", force=False, timeout=None):
        """A live fork (`jizhi trial fork`): one sibling per dict of values
        starts from the trial's checkpoint, the trial goes on as the
        control, and after `steps` steps (10) the best sibling by the
        objective continues and the others are stopped (keep="all": all
        continue). Waits for the decision and returns it as a dict (fork:
        "decided", siblings [ids], values, results {id: objective},
        decision {best, kept, stopped}, reason). Raises JizhiError when
        refused (no checkpoints, values out of the space, a trial not
        running)."""
        tid = trial.id if isinstance(trial, AskedTrial) else int(trial)
        if not siblings or not all(isinstance(x, dict) and x for x in siblings):
            raise ValueError("jizhi: fork needs one dict of values per sibling")
        args = ["trial", "fork", str(tid)]
        for sib in siblings:
            args.append(",".join("%s=%s" % (k, repr(float(v)) if isinstance(v, float)
                                             else v) for k, v in sib.items()))
        if steps is not None:
            args += ["--steps", str(int(steps))]
        if keep != "best":
            args += ["--keep", keep]
        if force:
            args.append("--force")
        if timeout is not None:
            args += ["--timeout", str(timeout)]
        return self._cli.json(args)

    def _show(self):
        return self._cli.json(["study", "show", self.name])

    @property
    def trials(self):
        """Every trial as a dict (id, number, state, params, value, metrics,
        reason, ...), oldest first."""
        return self._show()["trials"]

    @property
    def best_trial(self):
        """The best completed (feasible) trial as a dict, or None."""
        d = self._show()
        best = d.get("best")
        if not best:
            return None
        for t in d["trials"]:
            if t["id"] == best["trial"]:
                return t
        return None

    @property
    def best_params(self):
        b = self.best_trial
        return dict(b["params"]) if b else None

    @property
    def best_value(self):
        b = self.best_trial
        return b["value"] if b else None

    def trials_dataframe(self):
        """The trials as a pandas DataFrame (number, id, state, value,
        params_NAME..., metric_NAME...). Needs pandas."""
        import pandas as pd

        rows = []
        for t in self.trials:
            r = {"number": t["number"], "id": t["id"], "state": t["state"],
                 "value": t.get("value")}
            for k, v in (t.get("params") or {}).items():
                r["params_" + k] = v
            for k, v in (t.get("metrics") or {}).items():
                r["metric_" + k] = v
            rows.append(r)
        return pd.DataFrame(rows)

    def __repr__(self):
        return "<jizhi.Study %s>" % self.name


def create_study(spec, db="jizhi.db", controller=None, server_key=None):
    """Submits `spec` (a dict, or the path of a JSON file) as an
    ask-and-tell study and returns it. The spec is a jizhi study spec
    (docs/spec.md) without a `trial` section (one with `trial` runs its
    trials through dispatchers: `jizhi run` or `jizhi study submit`; it is
    refused here, before anything is stored). The same spec submitted again
    gives the existing study (resumed when stopped); another spec under the
    same name is refused. Without `controller` ("tcp://host:port", or an
    ipc:// endpoint), the controller serving `db` is used, or one is started
    for as long as this program runs. server_key: the controller's public
    key for tcp:// (else JIZHI_SERVER_KEY, or the key directory)."""
    if not isinstance(spec, (dict, str, os.PathLike)):
        raise TypeError("jizhi: spec must be a dict or the path of a JSON file, not %s"
                        % type(spec).__name__)
    if isinstance(spec, dict):
        d = spec
    else:
        with open(spec) as f:
            d = json.load(f)
    if isinstance(d, dict) and "trial" in d:
        raise JizhiError(
            "jizhi: %sthe spec has a `trial` section: its trials run through dispatchers "
            "(trial.command), so submit it with `jizhi run SPEC` or `jizhi study submit "
            "SPEC`; create_study is for ask-and-tell (a spec without `trial`)"
            % ("" if isinstance(spec, dict) else "%s: " % os.fspath(spec)))
    cli = _Cli(db, controller, server_key)
    child = cli.ensure_controller()
    if isinstance(spec, dict):
        fd, path = tempfile.mkstemp(suffix=".json", prefix="jizhi-spec-")
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        try:
            cli.run(["study", "submit", path])
        finally:
            os.unlink(path)
    else:
        cli.run(["study", "submit", os.fspath(spec)])
    return Study(d.get("name") if isinstance(d, dict) else None, cli, child)


def load_study(name, db="jizhi.db", controller=None, server_key=None):
    """The study `name` already submitted (raises JizhiError when there is
    none)."""
    cli = _Cli(db, controller, server_key)
    child = cli.ensure_controller()
    cli.json(["study", "show", name])
    return Study(name, cli, child)
