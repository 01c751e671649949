"""jizhi - the trial helper for Python programs (ctypes over libjizhi).

    import jizhi
    t = jizhi.Trial()                  # reads JIZHI_* from the environment
    lr = t.param("lr", 0.1)            # the type follows the default
    stop = False
    for step in range(100):
        for ins in t.poll():           # live instructions from the controller
            if ins.kind == "set" and ins.name == "lr":
                lr = ins.value
            elif ins.kind == "stop":
                stop = True
        if stop:
            break                      # ends training, not only the poll loop
        t.report(step, loss=..., val_acc=...)
    t.close()                          # flushes; also `with jizhi.Trial() as t:`

Outside a study (JIZHI_TRIAL unset) the same code runs standalone: params
take their defaults (or JIZHI_PARAMS), reports are printed to stderr.

The library is found through JIZHI_LIB (a path to libjizhi.so), then the
copy `pip install` built into the package (jizhi/libjizhi.so), then the
path `make install` recorded, then build/lib/libjizhi.so of the source tree
this package sits in, then the system's library path. No dependency beyond the standard library.
"""

import atexit
import ctypes
import ctypes.util
import enum
import json
import math
import os
import re
import warnings
import weakref

__all__ = ["Trial", "Instruction", "InsKind", "JizhiError", "load_library"]

__version__ = "0.2.0"  # JZ_VERSION in jizhi.h


class JizhiError(RuntimeError):
    """The environment is malformed or the library failed."""


class InsKind(enum.IntEnum):
    """jz_ins_kind in jizhi.h: the kinds of live instruction."""

    NONE = 0
    SET = 1
    STOP = 2
    PAUSE = 3
    RESUME = 4
    CHECKPOINT = 5
    LOAD = 6

_METRIC_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


class _CInstruction(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("id", ctypes.c_long),
        ("name", ctypes.c_char * 64),
        ("value", ctypes.c_double),
        ("str", ctypes.c_char * 1024),
    ]


def _candidates():
    env = os.environ.get("JIZHI_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "libjizhi.so")  # built by `pip install` (setup.py)
    if os.path.exists(bundled):
        yield bundled
    try:  # written by `make install`
        from ._installed import LIBJIZHI

        yield LIBJIZHI
    except ImportError:
        pass
    yield os.path.normpath(os.path.join(here, "..", "..", "..", "build", "lib", "libjizhi.so"))
    found = ctypes.util.find_library("jizhi")
    if found:
        yield found


_lib = None


def load_library():
    """Loads libjizhi once and declares its functions. Raises JizhiError."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    lib = None
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    if lib is None:
        raise JizhiError(
            "jizhi: cannot load libjizhi; set JIZHI_LIB to its path. Tried: "
            + "; ".join(tried or ["nothing"])
        )
    P = ctypes.c_void_p
    sigs = {
        "jz_open": (P, []),
        "jz_param_double": (ctypes.c_double, [P, ctypes.c_char_p, ctypes.c_double]),
        "jz_param_long": (ctypes.c_long, [P, ctypes.c_char_p, ctypes.c_long]),
        "jz_param_str": (ctypes.c_char_p, [P, ctypes.c_char_p, ctypes.c_char_p]),
        "jz_params_json": (ctypes.c_char_p, [P]),
        "jz_report": (ctypes.c_int, [P, ctypes.c_long, ctypes.c_char_p, ctypes.c_double]),
        "jz_poll": (ctypes.c_int, [P, ctypes.POINTER(_CInstruction)]),
        "jz_ack": (ctypes.c_int, [P, ctypes.POINTER(_CInstruction), ctypes.c_int, ctypes.c_char_p]),
        "jz_checkpoint_dir": (ctypes.c_char_p, [P]),
        "jz_checkpoint_done": (ctypes.c_int, [P, ctypes.c_long, ctypes.c_char_p]),
        "jz_flush": (ctypes.c_int, [P, ctypes.c_int]),
        "jz_trial_id": (ctypes.c_long, [P]),
        "jz_close": (None, [ctypes.POINTER(P)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    # The struct above must have the library's layout, or jz_poll would
    # write past it.
    try:
        size = lib.jz_instruction_size
    except AttributeError:
        raise JizhiError("jizhi: %s has no jz_instruction_size (older than this package)"
                         % getattr(lib, "_name", "libjizhi"))
    size.restype = ctypes.c_ulong
    size.argtypes = []
    if size() != ctypes.sizeof(_CInstruction):
        raise JizhiError("jizhi: jz_instruction is %d bytes in %s but %d in this package"
                         % (size(), getattr(lib, "_name", "libjizhi"),
                            ctypes.sizeof(_CInstruction)))
    _lib = lib
    return lib


def _b(s):
    return s.encode("utf-8") if isinstance(s, str) else s


def _s(b):
    return b.decode("utf-8", "replace") if b is not None else None


class Instruction:
    """A live instruction from the controller, as returned by Trial.poll().

    kind:  'set', 'stop', 'pause', 'resume', 'checkpoint' or 'load'
    code:  the same as an InsKind (InsKind.SET, ...)
    id:    the controller's instruction id
    name:  set: the parameter name (else '')
    value: set: the new value as sent: float, int or str; None for other
           kinds
    str:   set: the value as text; load: the checkpoint path
    path:  load: the checkpoint path (same as str), else None
    """

    __slots__ = ("kind", "code", "id", "name", "value", "str", "path", "_c")

    def __init__(self, c):
        self._c = c
        self.code = InsKind(c.kind)
        self.kind = self.code.name.lower()
        self.id = c.id
        self.name = _s(c.name)
        self.str = _s(c.str)
        self.path = self.str if self.kind == "load" else None
        if self.kind == "set":
            if math.isnan(c.value) and self.str not in ("nan", "NaN"):
                self.value = self.str  # a string value
            elif re.match(r"-?[0-9]+\Z", self.str or ""):
                self.value = int(self.str)
            else:
                self.value = c.value
        else:
            self.value = None

    def __repr__(self):
        if self.kind == "set":
            return "Instruction(id=%d, set %s=%r)" % (self.id, self.name, self.value)
        if self.kind == "load":
            return "Instruction(id=%d, load %r)" % (self.id, self.path)
        return "Instruction(id=%d, %s)" % (self.id, self.kind)


_open_trials = weakref.WeakSet()


@atexit.register
def _close_all():
    for t in list(_open_trials):
        try:
            t.close()
        except Exception:
            pass


class Trial:
    """The current trial (from the JIZHI_* environment), or a standalone one.

    Raises JizhiError when the environment is set but malformed (the library
    prints which variable) or libjizhi cannot be loaded.
    """

    def __init__(self):
        self._lib = load_library()
        h = self._lib.jz_open()
        if not h:
            raise JizhiError("jizhi: malformed trial environment (see the message above)")
        self._h = ctypes.c_void_p(h)
        _open_trials.add(self)

    def _handle(self):
        if self._h is None:
            raise JizhiError("jizhi: the trial is closed")
        return self._h

    @property
    def closed(self):
        return self._h is None

    @property
    def trial_id(self):
        """The controller's trial id, or None when standalone."""
        i = self._lib.jz_trial_id(self._handle())
        return None if i < 0 else i

    @property
    def standalone(self):
        return self.trial_id is None

    @property
    def params(self):
        """All current parameter values as a dict (a copy)."""
        return json.loads(_s(self._lib.jz_params_json(self._handle())))

    def param(self, name, default):
        """The trial's value of `name`, or `default` when the trial has none.
        The tuned value's type wins over the default's between numbers (an
        int default with a tuned 0.5 gives 0.5); a value of another kind
        (a string where the default is a number, say) is returned with a
        warning, since it is what the study chose."""
        if default is not None and not isinstance(default, (bool, int, float, str)):
            raise TypeError("jizhi: param default must be float, int, bool or str, not %s"
                            % type(default).__name__)
        params = self.params
        if name not in params:
            return default
        value = params[name]

        def kind(v):
            if isinstance(v, bool):
                return "bool"
            return "number" if isinstance(v, (int, float)) else type(v).__name__

        if isinstance(default, bool) and value in (0, 1) and not isinstance(value, float):
            return bool(value)
        if default is not None and kind(value) != kind(default):
            warnings.warn("jizhi: param %r is %r (%s) but its default %r is a %s"
                          % (name, value, kind(value), default, kind(default)), stacklevel=2)
        return value

    def report(self, step, **metrics):
        """Queues metric points for `step` (never blocks on the network).
        Returns True, or False when the queue is full or the controller
        refused this trial. Raises ValueError on a bad metric name."""
        h = self._handle()
        ok = True
        step = int(step)
        for name, value in metrics.items():
            if not _METRIC_RE.match(name) or len(name) >= 64:
                raise ValueError("jizhi: metric name %r must match [A-Za-z_][A-Za-z0-9_.]*"
                                 " (under 64 characters)" % name)
            if self._lib.jz_report(h, step, _b(name), float(value)) != 0:
                ok = False
        return ok

    def poll(self):
        """Yields pending instructions, without blocking. SET and LOAD have
        already updated the params when an instruction is yielded. One not
        ack()ed is settled at the next call into the trial as what is true:
        set and resume as applied, checkpoint only after checkpoint_done(),
        load as refused (ack() a load); a stop as taken when the trial
        closes, as refused when it reports after it (draining poll(),
        flush() or a last checkpoint_done() in between judge nothing); an
        un-acked pause is carried out by the helper, which blocks that next
        call until a resume (or a stop) arrives; poll() then yields it."""
        while self._h is not None:
            c = _CInstruction()
            if self._lib.jz_poll(self._h, ctypes.byref(c)) != 1:
                return
            yield Instruction(c)

    def ack(self, ins, applied=True, detail=None):
        """Acknowledges `ins` as applied or refused (with `detail`).
        Returns True, or False when it was acknowledged already."""
        return self._lib.jz_ack(self._handle(), ctypes.byref(ins._c), 1 if applied else 0,
                                _b(detail) if detail is not None else None) == 0

    @property
    def checkpoint_dir(self):
        """Where to write checkpoints (created if missing)."""
        return _s(self._lib.jz_checkpoint_dir(self._handle()))

    def checkpoint_done(self, step, path):
        """Tells the controller a checkpoint for `step` is complete at `path`."""
        return self._lib.jz_checkpoint_done(self._handle(), int(step), _b(os.fspath(path))) == 0

    def flush(self, timeout_ms=10000):
        """Waits until every report is acknowledged as persisted. True, or
        False on timeout."""
        return self._lib.jz_flush(self._handle(), int(timeout_ms)) == 0

    def close(self):
        """Flushes (up to JIZHI_CLOSE_TIMEOUT_MS) and releases the trial.
        Safe to call twice."""
        if self._h is not None:
            h = self._h
            self._h = None
            _open_trials.discard(self)
            self._lib.jz_close(ctypes.byref(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        if self._h is None:
            return "<jizhi.Trial closed>"
        tid = self.trial_id
        return "<jizhi.Trial %s>" % ("standalone" if tid is None else "id=%d" % tid)


# ask-and-tell and optimize (jizhi/study.py): imported last, it builds on Trial
from .study import AskedTrial, Study, TrialPruned, create_study, load_study  # noqa: E402

__all__ += ["AskedTrial", "Study", "TrialPruned", "create_study", "load_study"]
