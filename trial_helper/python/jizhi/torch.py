"""jizhi.torch - live control of a plain PyTorch training loop.

    import torch, jizhi, jizhi.torch
    t = jizhi.Trial()
    opt = torch.optim.SGD(model.parameters(), lr=t.param("lr", 0.1))
    ctl = jizhi.torch.attach(t, opt, model=model)   # after init_process_group under DDP
    for x, y in ctl.loader(train_set, batch_size=t.param("batch_size", 64),
                           shuffle=True, epochs=5):
        opt.zero_grad(); loss = F.cross_entropy(model(x), y); loss.backward(); opt.step()
        if not ctl.step(loss=loss):      # applies pending instructions, on every rank
            break
        ...
    ctl.report_eval(val_acc=acc)

At `ctl.step` the pending instructions are applied between optimizer steps:
`set` of lr, momentum, weight_decay, betas/beta1/beta2, eps (every param
group) and batch_size (loaders made by `ctl.loader` are rebuilt at the next
batch), `checkpoint` (torch.save of model, optimizer, GradScaler, lr
scheduler, step, RNG and loader positions into trial.checkpoint_dir, then
trial.checkpoint_done), `load` (the same, back; then the trial's live
params on top), `pause` (blocks until resume or stop), `stop` (step()
returns False after a final report). What it cannot apply is acknowledged
as refused with the reason. A restarted trial (`pause --release` and
`resume`, or the controller's restart after an unacknowledged load) starts
from $JIZHI_LOAD_CHECKPOINT: attach() loads it.

Under DDP (torch.distributed initialised, world size > 1) only rank 0 polls
the controller and reports, and the ranks look at the instructions
together, at the same step. By default (model= the DistributedDataParallel
module) a communication hook adds elements to DDP's first bucket that rank
0 fills: its pending `set`s of built-in names themselves, which every rank
applies at that step's ctl.step with no collective of this module
(acknowledged with rank 0's outcome as it takes them), and
whether another instruction waits, which makes a look at that step; else (grad_flag=False, sync_every, another
model, or the user's own hook) at most once per `sync_ms` of training and
at least once every step it is longer. At a look rank 0 broadcasts the
"sync box" (_BOX_WORDS int64): the pending instruction (JSON, when it
fits; else its length, and a second broadcast carries it) or none and the
number of steps to the next look; every rank applies it at that step, and
an all-reduce of the box at once carries each rank's refusal back, so rank
0 acknowledges it once every rank has (a refusal on any rank refuses it;
a load that only some ranks could apply raises JizhiError on every rank),
before it calls the helper again (libjizhi settles an instruction at the
program's next call: jizhi.h, jz_poll). So a step's report goes first: the
hook takes nothing in the backward of a step that reports, and rank 0's
reports made while the hook holds an instruction wait for its look.

This module imports torch; `import jizhi` alone does not. docs/helper-api.md
(PyTorch) is the guided tour.
"""

import ctypes
import json
import math
import os
import pickle
import random
import sys
import time
import weakref

import torch
import torch.distributed as dist

from . import Instruction, JizhiError, Trial, _CInstruction

__all__ = ["attach", "Controller"]

_FORMAT = "jizhi.torch/1"
_BUILTIN = ("lr", "momentum", "weight_decay", "betas", "beta1", "beta2", "eps", "batch_size")
_LR_RULES = ("none", "linear", "sqrt", "adascale")
_PAUSE_POLL_S = 0.2
# The sync box (DDP): [payload bytes, refusals, steps to the next look,
# unused] then the payload, JSON packed into int64 words. A set or a
# checkpoint fits; a load with many params takes a second broadcast.
_BOX_HEAD = 4
_BOX_WORDS = 64
# The flag on DDP's first bucket: [look, inline bytes, inline bytes' values]
# after the gradients; rank 0 writes them, the others zeros, so the sum is
# rank 0's. Inline: `set`s of built-in names (whose outcome is the same on
# every rank), as a JSON list of at most _INLINE_BYTES bytes, one byte an
# element (exact in every float type a gradient may have).
_FLAG_HEAD = 2
_INLINE_BYTES = 120
_SYNC_K_MAX = 1000


def attach(trial, optimizer, model=None, scaler=None, scheduler=None, *, report_every=10,
           lr_scaling="none", noise_scale=None, handlers=None, keep_checkpoints=3,
           sync_ms=10.0, sync_every=None, grad_flag=None, extra_state=None, resume=True):
    """Attaches live control to a training loop; returns a Controller.

    trial:        a jizhi.Trial (on DDP ranks other than 0 it is not used)
    optimizer:    a torch.optim.Optimizer; `set` changes every param group
    model, scaler, scheduler: saved and loaded with checkpoints (optional);
                  with a scheduler, `set lr` sets the base rate it scales
    report_every: steps between train reports (train_loss, lr, ...), 0: never
    lr_scaling:   "none" (default), "linear", "sqrt" or "adascale" (needs
                  noise_scale, the gradient noise scale B_simple): how the
                  lr follows a batch_size change made through ctl.loader
    handlers:     {name: fn(value) or None} for `set` of other parameters
                  (called on every rank; False or an exception refuses it;
                  None accepts it: read the value from ctl.params)
    keep_checkpoints: how many of its own checkpoint files to keep (None: all)
    sync_ms:      under DDP, the ranks meet to look at the instructions at
                  most once per sync_ms milliseconds of training, at least
                  once every step it is longer (rank 0 measures the steps):
                  the cost of a step without an instruction is one small
                  all-reduce per max(step, sync_ms), and an instruction waits
                  at most that long for its step (10; 0: every step)
    sync_every:   a fixed number of steps between looks instead (None: every
                  step on one process, sync_ms's cadence under DDP)
    grad_flag:    None (default): under DDP with `model` the
                  DistributedDataParallel module, no sync_every and no
                  communication hook of your own, the flag: a look at the
                  steps that need one and no collective on the others,
                  instead of sync_ms: rank 0's "an instruction waits" rides
                  as one more element on the model's gradient all-reduce (a
                  DDP communication hook that does DDP's own mean, plus a
                  copy of its first bucket a step); else the cadence. True:
                  the flag or ValueError; False: the cadence. With the flag
                  torch refuses a communication hook of yours registered
                  after attach (register it before: the cadence then)
    extra_state:  {name: object with state_dict()/load_state_dict()} saved too
    resume:       load $JIZHI_LOAD_CHECKPOINT when set (a restarted trial)
    Raises ValueError for bad options."""
    return Controller(trial, optimizer, model=model, scaler=scaler, scheduler=scheduler,
                      report_every=report_every, lr_scaling=lr_scaling,
                      noise_scale=noise_scale, handlers=handlers,
                      keep_checkpoints=keep_checkpoints, sync_ms=sync_ms,
                      sync_every=sync_every, grad_flag=grad_flag, extra_state=extra_state,
                      resume=resume)


def _eval_at_step():
    """JIZHI_EVAL_AT_STEP, the step at which the controller judges a fork's
    sibling (0: unset)."""
    e = os.environ.get("JIZHI_EVAL_AT_STEP")
    if not e:
        return 0
    try:
        v = int(e)
    except ValueError:
        v = 0
    if v < 1:
        raise JizhiError("jizhi.torch: JIZHI_EVAL_AT_STEP: expected a step from 1, got %r"
                         % e)
    return v


class _Refused(Exception):
    """An instruction that cannot be applied; the message is the reason."""


def _number(name, value, low=None, high=None, low_open=False, high_open=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Refused("%s: expected a number, got %r" % (name, value))
    v = float(value)
    if not math.isfinite(v):
        raise _Refused("%s: %r is not finite" % (name, value))
    if low is not None and (v < low or (low_open and v == low)):
        raise _Refused("%s: %r is out of range (must be %s %g)"
                       % (name, value, ">" if low_open else ">=", low))
    if high is not None and (v > high or (high_open and v == high)):
        raise _Refused("%s: %r is out of range (must be %s %g)"
                       % (name, value, "<" if high_open else "<=", high))
    return v


def _words(n):
    return (n + 7) // 8


def _pack(data):
    """bytes -> an int64 tensor of their 8-byte words (zero padded)."""
    return torch.frombuffer(bytearray(data) + bytes(-len(data) % 8), dtype=torch.int64)


def _unpack(words, n):
    """The first n bytes of an int64 tensor's words, as text."""
    return bytes(words.cpu().view(torch.uint8).tolist()[:n]).decode()


def _lr_gain(rule, b0, b, noise_scale):
    if not b0 or not b or rule == "none":
        return 1.0
    if rule == "linear":
        return b / b0
    if rule == "sqrt":
        return math.sqrt(b / b0)
    s2, S = noise_scale / b0, b / b0  # AdaScale, as schedulers/sched_bs_gns.c
    return (s2 + 1) / (s2 / S + 1)


class _Loader:
    """An iterable over batches that jizhi.torch can rebuild: a new batch
    size from the next batch on, and the position (epoch, samples into it)
    saved in and restored from checkpoints. Under DDP each rank reads its
    DistributedSampler share; batch_size is per rank."""

    def __init__(self, ctl, dataset, batch_size, shuffle, seed, epochs, drop_last, kwargs):
        # the ranks, not the controller (which holds its loaders: no cycle,
        # so a controller let go of is freed at once)
        self._ddp, self._world, self._rank = ctl.ddp, ctl.world_size, ctl.rank
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epochs = epochs
        self.drop_last = bool(drop_last)
        self._kwargs = kwargs
        self.epoch = 0  # epochs completed
        self.pos = 0  # samples of this rank's share read in the current epoch
        self._version = 0
        self._gen = torch.Generator()  # the DataLoader draws its seed here, not from
        self._gen.manual_seed(self.seed)  # the global RNG (so a rebuild changes nothing)

    def _indices(self, epoch):
        if self._ddp:
            s = torch.utils.data.distributed.DistributedSampler(
                self.dataset, num_replicas=self._world, rank=self._rank,
                shuffle=self.shuffle, seed=self.seed)
            s.set_epoch(epoch)
            return list(s)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + epoch)
            return torch.randperm(len(self.dataset), generator=g).tolist()
        return list(range(len(self.dataset)))

    def _end(self, n):
        return n - n % self.batch_size if self.drop_last else n

    def __len__(self):
        """Batches left in the current epoch at the current batch size."""
        n = self._end(len(self._indices(self.epoch)))
        return max(0, -(-(n - self.pos) // self.batch_size))

    def __iter__(self):
        # epochs=None: to the end of the current epoch, like a DataLoader;
        # epochs=E: until E epochs are done in all (so a resumed run ends
        # where an uninterrupted one would)
        one = self.epochs is None
        while one or self.epoch < self.epochs:
            version = self._version
            idx = self._indices(self.epoch)
            n = self._end(len(idx))
            if self.pos >= n:
                self.epoch += 1
                self.pos = 0
                if one:
                    return
                continue
            kw = dict(self._kwargs)
            kw.setdefault("generator", self._gen)
            dl = torch.utils.data.DataLoader(self.dataset, batch_size=self.batch_size,
                                             sampler=idx[self.pos:n], **kw)
            for batch in dl:
                self.pos = min(n, self.pos + self.batch_size)
                yield batch
                if self._version != version:
                    break  # a new batch size or a load: rebuild from self.pos

    def state_dict(self):
        return {"epoch": self.epoch, "pos": self.pos, "batch_size": self.batch_size,
                "seed": self.seed, "gen": self._gen.get_state()}

    def load_state_dict(self, st):
        self.epoch = int(st["epoch"])
        self.pos = int(st["pos"])
        self.batch_size = int(st["batch_size"])
        self.seed = int(st["seed"])
        if "gen" in st:
            self._gen.set_state(st["gen"])
        self._version += 1


class _FlagState:
    """The flag hook's state, kept on the DDP module (model._jizhi_flag):
    torch takes one hook per model, so a later attach() to the same model
    rebinds `ctl` (None: DDP's mean alone) instead of registering another.
    inflight: this backward's all-reduces (work, future, bucket, both);
    both: DDP's first bucket and the flag's elements, kept from step to step.
    flag: whether bucket 0 carries the flag's elements, set by attach() on
    every rank alike, so every rank all-reduces the same sizes.
    The controller is held weakly: DDP's reducer holds this state from C++,
    where Python's collector cannot see it, so a strong reference would keep
    the controller, its model, the reducer and the process group alive for
    ever (gloo's threads then run into the interpreter's finalisation). A
    controller no one holds any more sends zeros in the flag's elements and
    reads none, each rank from whenever its collector frees it (between two
    buckets too: what it took at bucket 0 goes with it)."""

    def __init__(self, ctl):
        self._ctl = None
        self.ctl = ctl
        self.flag = ctl is not None
        self.inflight = []
        self.both = None

    @property
    def ctl(self):
        return self._ctl() if self._ctl is not None else None

    @ctl.setter
    def ctl(self, ctl):
        self._ctl = weakref.ref(ctl) if ctl is not None else None


def _flag_hook(state, bucket):
    """The DDP communication hook of the flag (attach's grad_flag): the
    mean of each bucket's gradients over the ranks, as DDP's own all-reduce
    makes it (divided first, then summed), with _FLAG_HEAD + _INLINE_BYTES
    more elements on bucket 0: rank 0's pending `set`s of built-in names
    themselves (taken here; every rank applies them at the next ctl.step,
    no collective of their own) and whether another instruction waits
    (kept in ctl._stash for a look at that step). Each bucket's all-reduce
    starts at once (overlapped with the rest of backward()); the last
    bucket's call waits for them all, on the training thread, and completes
    their futures. No callback runs on gloo's threads: with torch 1.13 a
    Python callback there (Future.then) made a process abort at exit about
    once in six ("terminate called without an active exception")."""
    buf = bucket.buffer().div_(dist.get_world_size())
    both = None
    if bucket.index() == 0:
        _flag_drain(state)  # a backward() that raised left its all-reduces
        if state.flag:
            both = _flag_fill(state, state.ctl, buf)
    fut = torch.futures.Future(devices=[buf.device] if buf.is_cuda else None)
    if bucket.is_last() and not state.inflight:  # one bucket: nothing to overlap
        dist.all_reduce(buf if both is None else both)
        _flag_done(state.ctl, buf, both, fut)
        return fut
    work = dist.all_reduce(buf if both is None else both, async_op=True)
    state.inflight.append((work, fut, buf, both))
    if bucket.is_last():
        _flag_drain(state)
    return fut


def _flag_fill(state, ctl, buf):
    """Bucket 0: its gradients and, after them, the flag's elements (rank
    0's; zeros on the others and where the controller is gone) in one
    buffer kept from step to step."""
    n = buf.numel()
    both = state.both
    if both is None or both.numel() != n + _FLAG_HEAD + _INLINE_BYTES or \
            both.dtype != buf.dtype or both.device != buf.device:
        both = state.both = torch.empty(n + _FLAG_HEAD + _INLINE_BYTES, dtype=buf.dtype,
                                        device=buf.device)
    both[:n].copy_(buf)
    both[n:].zero_()
    if ctl is not None and ctl._lead and not ctl.stopped and \
            not getattr(ctl.trial, "closed", False):  # a closed trial's handle is gone
        if ctl._reports_next():
            # this step's report (of steps before any change) goes to the
            # helper before anything is acknowledged: nothing taken here (the
            # next backward takes it); after a report step that took nothing
            # either (report_every=1), a look at this step, after its report
            if ctl._took_none:
                both[n] = 1.0
            ctl._took_none = True
            return both
        ctl._took_none = False
        data = ctl._take_inline()
        if data:
            both[n + 1] = len(data)
            both[n + _FLAG_HEAD:n + _FLAG_HEAD + len(data)] = torch.frombuffer(
                bytearray(data), dtype=torch.uint8)
        if ctl._stash is not None:
            both[n] = 1.0
    return both


def _flag_drain(state):
    """Waits for the all-reduces in flight and completes their futures."""
    inflight, state.inflight = state.inflight, []
    for work, fut, buf, both in inflight:
        work.wait()
        _flag_done(state.ctl, buf, both, fut)


def _flag_done(ctl, buf, both, fut):
    """A bucket's all-reduce is done: its gradients (and on the first
    bucket the flag and the inline sets, to ctl) to their places."""
    if both is not None:
        n = buf.numel()
        look, size = both[n:n + _FLAG_HEAD].tolist()  # on CUDA: waits for the all-reduce
        if ctl is None:  # the controller is gone: the gradients alone
            size = 0
        else:
            ctl._flag_due = ctl._flag_due or look > 0
        if size > 0:
            raw = both[n + _FLAG_HEAD:n + _FLAG_HEAD + int(size)].to(torch.uint8)
            ctl._inline += [{"kind": "set", "name": k, "value": v}
                            for k, v in json.loads(bytes(raw.tolist()))]
        buf.copy_(both[:n])
    fut.set_result(buf)


class Controller:
    """What attach() returns. Members: step(), loader(), report_eval(),
    save(), load(), params, global_step, rank, world_size, ddp, looks_by, stopped,
    eval_due (True at the step a fork judges this trial at: evaluate and
    report_eval there), eval_at_step."""

    def __init__(self, trial, optimizer, model=None, scaler=None, scheduler=None, *,
                 report_every=10, lr_scaling="none", noise_scale=None, handlers=None,
                 keep_checkpoints=3, sync_ms=10.0, sync_every=None, grad_flag=None,
                 extra_state=None, resume=True):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError("jizhi.torch.attach: optimizer must be a torch.optim.Optimizer, "
                             "not %s" % type(optimizer).__name__)
        if lr_scaling not in _LR_RULES:
            raise ValueError("jizhi.torch.attach: lr_scaling must be one of %s, not %r"
                             % (", ".join(_LR_RULES), lr_scaling))
        if lr_scaling == "adascale" and not (noise_scale and noise_scale > 0):
            raise ValueError("jizhi.torch.attach: lr_scaling='adascale' needs noise_scale "
                             "(the gradient noise scale B_simple, > 0)")
        if int(report_every) < 0 or (sync_every is not None and int(sync_every) < 1):
            raise ValueError("jizhi.torch.attach: report_every must be >= 0 and "
                             "sync_every >= 1 (or None)")
        if isinstance(sync_ms, bool) or not isinstance(sync_ms, (int, float)) or \
                not sync_ms >= 0 or not math.isfinite(sync_ms):
            raise ValueError("jizhi.torch.attach: sync_ms must be a number >= 0, not %r"
                             % (sync_ms,))
        if grad_flag is not None and not isinstance(grad_flag, bool):
            raise ValueError("jizhi.torch.attach: grad_flag must be True, False or None, "
                             "not %r" % (grad_flag,))
        if keep_checkpoints is not None and int(keep_checkpoints) < 1:
            raise ValueError("jizhi.torch.attach: keep_checkpoints must be >= 1 or None")
        self.trial = trial
        self.optimizer = optimizer
        self.model = model
        self.scaler = scaler
        self.scheduler = scheduler
        self.report_every = int(report_every)
        self.lr_scaling = lr_scaling
        self.noise_scale = noise_scale
        self.handlers = dict(handlers or {})
        self.keep_checkpoints = keep_checkpoints
        self.sync_every = None if sync_every is None else int(sync_every)
        self.sync_ms = float(sync_ms)
        self.extra_state = dict(extra_state or {})

        self.ddp = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        self.rank = dist.get_rank() if self.ddp else 0
        self.world_size = dist.get_world_size() if self.ddp else 1
        self._dev = torch.device("cpu")
        if self.ddp and dist.get_backend() == "nccl":
            self._dev = torch.device("cuda", torch.cuda.current_device())
        self._box = torch.zeros(_BOX_WORDS, dtype=torch.int64, device=self._dev)
        self._box_rest = [0] * (_BOX_WORDS - _BOX_HEAD)
        self._box_k = None  # rank 0: the box holds only this number of steps (None: unknown)
        # The tensors made for this controller's latest collective (attach's
        # broadcast of the params, save()'s gather, a long load), kept until
        # the next one: with torch 1.13 a gloo worker that drops the last
        # reference to a tensor made in Python takes the interpreter's lock,
        # and in a process already ending that aborts it ("terminate called
        # without an active exception").
        self._held = ()

        self.global_step = 0
        self.stopped = False
        self._moved = False  # a load or resume moved the step away from the caller's
        self._paused = False
        self._loaders = []
        self._loader_states = []  # restored before the loaders were made
        self._b0 = None  # the first loader's batch size: lr_scaling's reference
        self._lr_scale = 1.0
        self._saved = []  # our checkpoint files, oldest first
        self._loss_sum = 0.0  # a float, plus a tensor for losses not on the CPU
        self._loss_n = 0
        self._calls = 0  # step() calls: the same on every rank
        self._sync_at = 1  # the call that looks at the instructions next
        self._sync_k = 1  # calls between the last two looks
        self._sync_t = None  # rank 0: perf_counter() at the end of the last look
        self.syncs = 0  # collectives jizhi.torch ran at ctl.step (for the curious)
        self._t_last = time.perf_counter()
        self._step_last = 0
        self.last_checkpoint = None
        # JIZHI_EVAL_AT_STEP: a fork's sibling is judged on its objective at
        # this step; eval_due is True at the step() that reaches it (once)
        self.eval_at_step = _eval_at_step()
        self.eval_due = False
        self._eval_at_left = True

        base = self._bases()
        self._lr = base[0]
        self._ratio = [b / base[0] if base[0] else 1.0 for b in base]
        self._lead = self.rank == 0 and trial is not None and not trial.standalone
        # a real jizhi.Trial: poll and report through libjizhi directly (one
        # ctypes call, no generator, names encoded once)
        self._fast = None
        if self._lead and type(trial) is Trial:
            self._fast = (trial._lib.jz_poll, trial._lib.jz_report, trial._h)
            self._cins = _CInstruction()
            self._cins_ref = ctypes.byref(self._cins)
        self._names = {}  # metric name -> its bytes, checked once
        # the flag: _flag_hook sets _flag_due (the same on every rank) when
        # rank 0 took an instruction (_stash) during the last backward
        self._flag_due = False
        self._stash = None
        self._took_none = False  # rank 0: the last hook took nothing, as its step reported
        self._stride = 1  # the program's step numbers' last stride (step=)
        self._later = []  # rank 0: reports made while _stash was open, sent after the look
        self._flush_later = False  # and a flush of them (report_eval at eval_due)
        self._inline = []  # the inline sets the last backward brought (every rank)
        self._grad_flag = False  # set last (the hook is registered when nothing can fail)
        params = trial.params if (self.rank == 0 and trial is not None) else None
        self.params = (self._bcast(params) if self.ddp else params) or {}

        path = os.environ.get("JIZHI_LOAD_CHECKPOINT") if resume else None
        if path:
            try:
                self._load(path)
            except _Refused as e:
                raise JizhiError("jizhi.torch: JIZHI_LOAD_CHECKPOINT: %s" % e)
            self._apply_params(self.params)
            self._moved = True
            self._say("resumed from %s at step %d" % (path, self.global_step))
        self._grad_flag = self._flag_attach(grad_flag, model)
        # how the ranks know when to look: "flag" (on DDP's all-reduce),
        # "cadence" (sync_ms/sync_every) or "alone" (one process: every step)
        self.looks_by = "flag" if self._grad_flag else "cadence" if self.ddp else "alone"

    def _flag_attach(self, grad_flag, model):
        """Registers the flag hook, or rebinds the one an earlier attach()
        registered on this model, when grad_flag asks for it (True) or
        allows it (None: under DDP with model= the DistributedDataParallel
        module over all the ranks, no sparse gradients, no sync_every, and
        no communication hook of the user's). True when the looks follow
        the flag, False for the cadence (a hook of ours left on the model
        then does DDP's mean alone)."""
        is_ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
        state = getattr(model, "_jizhi_flag", None) if is_ddp else None
        why = None  # why the flag cannot carry the instructions
        if not self.ddp:
            why = "no DDP"
        elif not is_ddp:
            why = "model= is not the DistributedDataParallel module but %s" % type(model).__name__
        elif dist.get_world_size(model.process_group) != self.world_size:
            why = "the model's DDP process group is not all %d ranks" % self.world_size
        elif any(getattr(m, "sparse", False) is True for m in model.modules()):
            why = "the model has sparse gradients"
        use = grad_flag is True or (grad_flag is None and why is None and
                                    self.sync_every is None)
        if use and why is not None:
            raise ValueError("jizhi.torch.attach: grad_flag: %s" % why)
        if state is not None:  # our hook from an earlier attach(): ours now, or DDP's mean
            state.ctl = self if use else None
            state.flag = use
            return use
        if not use:
            return False
        state = _FlagState(self)
        try:
            model.register_comm_hook(state, _flag_hook)
        except RuntimeError as e:  # torch allows one hook per model
            if grad_flag is None:
                return False  # the user's own hook: the cadence
            raise ValueError("jizhi.torch.attach: grad_flag: the model already has a "
                             "communication hook (%s)" % e)
        model._jizhi_flag = state
        return True

    def _reports_next(self):
        """Rank 0, in the flag hook: whether the coming ctl.step reports
        (its step: the next one, or the program's step= numbers at their
        last stride)."""
        return bool(self.report_every) and \
            (self.global_step + self._stride) % self.report_every == 0

    def _take_inline(self):
        """Rank 0, in the flag hook: takes the pending instructions while
        they are `set`s of built-in names that fit the bucket together (the
        first other one goes to _stash for a look). Each is acknowledged
        with rank 0's outcome (a built-in name's is the same on every rank)
        before the next is polled, as libjizhi settles an instruction at the
        next call into it; a refused one is not carried. Returns the JSON
        list of [name, value] of those applied at the next ctl.step (b""
        for none)."""
        sets = []
        data = b""
        while self._stash is None:
            msg, ins = self._next()
            if msg is None:
                break
            if msg["kind"] == "set" and msg["name"] in _BUILTIN and \
                    msg["name"] not in self.handlers:
                more = json.dumps(sets + [[msg["name"], msg["value"]]],
                                  separators=(",", ":")).encode()
                if len(more) <= _INLINE_BYTES:
                    try:
                        self._setter(msg["name"], msg["value"])  # checks, changes nothing
                    except _Refused as e:
                        self.trial.ack(ins, False, "jizhi.torch: %s" % e)
                        continue
                    self.trial.ack(ins, True, None)
                    sets.append([msg["name"], msg["value"]])
                    data = more
                    continue
            self._stash = (msg, ins)
        return data

    def _apply_inline(self):
        """At ctl.step: the inline sets of the last backward, applied on
        every rank (rank 0 acknowledged them when it took them)."""
        msgs, self._inline = self._inline, []
        for msg in msgs:
            detail = self._apply(msg)
            if detail is not None:  # rank 0 checked it: not expected
                self._say("%s" % detail)

    # ---- the training loop's calls --------------------------------------------

    def loader(self, dataset, batch_size=None, shuffle=False, *, epochs=None, seed=0,
               drop_last=False, **dataloader_kwargs):
        """An iterable over `dataset`'s batches that follows `set batch_size`
        (rebuilt at the next batch) and is saved with checkpoints. epochs=None
        iterates one epoch per `for` (like a DataLoader); epochs=E iterates
        until E epochs are done in all, counting those before a restart.
        batch_size defaults to the trial's batch_size param (else 64); other
        keywords go to torch.utils.data.DataLoader (not sampler/shuffle)."""
        for k in ("sampler", "batch_sampler", "shuffle"):
            if k in dataloader_kwargs:
                raise ValueError("jizhi.torch: ctl.loader makes its own sampler; %r is "
                                 "not an option" % k)
        if batch_size is None:
            batch_size = self.params.get("batch_size", 64)
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError("jizhi.torch: batch_size must be a positive integer, not %r"
                             % (batch_size,))
        ld = _Loader(self, dataset, batch_size, shuffle, seed, epochs, drop_last,
                     dataloader_kwargs)
        if self._b0 is None:
            self._b0 = ld.batch_size
        i = len(self._loaders)
        if i < len(self._loader_states) and self._loader_states[i] is not None:
            ld.load_state_dict(self._loader_states[i])
            if "batch_size" in self.params:  # the live param wins, as after a load
                ld.batch_size = int(self.params["batch_size"])
        self._loaders.append(ld)
        return ld

    def step(self, step=None, loss=None, **metrics):
        """Call once per optimizer step, after optimizer.step(). Counts the
        step (the caller's `step` when given, until a load or a restart moves
        training to a checkpoint's step), applies pending instructions, and
        every report_every steps reports train_loss (the mean since the last
        report), lr, batch_size, step_time_s and `metrics` (rank 0 only).
        Returns False once a stop has arrived (after a final report), else
        True. Blocks while the trial is paused."""
        if self.stopped:
            return False
        if step is not None and not self._moved:
            self._stride = max(1, int(step) - self.global_step)
            self.global_step = int(step)
        else:
            self._stride = 1
            self.global_step += 1
        self.eval_due = 0 < self.eval_at_step <= self.global_step and self._eval_at_left
        self._eval_at_left &= not self.eval_due
        if loss is not None:
            if type(loss) is float or type(loss) is int:
                self._loss_sum += loss
            elif loss.device.type == "cpu":
                self._loss_sum += loss.item()  # no device to wait for: cheaper than a tensor add
            else:
                self._loss_sum = self._loss_sum + loss.detach()  # no sync with the device
            self._loss_n += 1
        if self.report_every and self.global_step % self.report_every == 0:
            # before the look: the flag's hook took nothing at this step (it
            # foresaw the report), so the report goes before any instruction
            # applied at it is acknowledged (where the hook did take one, the
            # program's step= numbers having jumped, _put keeps it for after)
            self._report(metrics)
            metrics = None
        self._calls += 1
        if self._inline:
            self._apply_inline()
        if self._flag_due if self._grad_flag else self._calls >= self._sync_at:
            self._sync()
        self._put_later()
        if self.stopped:
            if metrics is not None or self._loss_n:
                self._report(metrics or {})
            if self._lead:
                self.trial.flush(5000)
            return False
        return True

    def report_eval(self, **metrics):
        """Reports evaluation metrics (val_acc=..., ...) at the current step,
        from rank 0. True, or False when the helper's queue refused them.
        At the step where eval_due is True they are sent at once (a fork's
        decision waits on them), not with the helper's next batch. Under
        DDP, called between backward() and ctl.step while the flag's hook
        holds an instruction, they wait for that ctl.step's look."""
        if self.rank != 0 or self.trial is None:
            return True
        vals = {k: float(v.item() if torch.is_tensor(v) else v) for k, v in metrics.items()}
        ok = self._put(vals)
        if self.eval_due and self._lead:
            if self._later:
                self._flush_later = True  # with them, after the look
            else:
                self.trial.flush(2000)  # a fork's decision waits on it: not the next batch
        return ok

    @property
    def lr(self):
        """The lr param's current value (the base rate of the first param group,
        before lr_scaling)."""
        return self._lr

    # ---- checkpoints --------------------------------------------------------

    def save(self, path=None):
        """Saves a checkpoint (every rank must call it under DDP; rank 0 writes)
        to `path`, by default trial.checkpoint_dir/ckpt-STEP.pt, written whole
        then renamed. Returns the path. Does not tell the controller."""
        st = self._state()
        if self.ddp:
            st["rng_ranks"] = self._gather_obj(st["rng"])
        if self.rank != 0:
            return path
        if path is None:
            d = self.trial.checkpoint_dir if self.trial is not None else "."
            path = os.path.join(d, "ckpt-%d.pt" % self.global_step)
        path = os.path.abspath(path)
        tmp = "%s.tmp.%d" % (path, os.getpid())
        try:
            torch.save(st, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    def load(self, path):
        """Loads a checkpoint written by save() (every rank under DDP). The
        trial's live params are not applied on top: a load instruction does."""
        self._load(path)
        self._moved = True

    def _state(self):
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        np = sys.modules.get("numpy")
        if np is not None:
            rng["numpy"] = np.random.get_state()
        st = {
            "format": _FORMAT,
            "step": self.global_step,
            "optimizer": self.optimizer.state_dict(),
            "lr": self._lr, "lr_scale": self._lr_scale, "b0": self._b0,
            "loaders": [ld.state_dict() for ld in self._loaders],
            "rng": rng,
            "world_size": self.world_size,
            "params": dict(self.params),
        }
        if self.model is not None:
            st["model"] = self.model.state_dict()
        if self.scaler is not None:
            st["scaler"] = self.scaler.state_dict()
        if self.scheduler is not None:
            st["scheduler"] = self.scheduler.state_dict()
        st["extra"] = {k: v.state_dict() for k, v in self.extra_state.items()}
        return st

    def _load(self, path):
        try:
            st = torch.load(path, map_location="cpu")
        except Exception as e:
            raise _Refused("cannot read checkpoint %s: %s" % (path, e))
        if not isinstance(st, dict) or st.get("format") != _FORMAT:
            raise _Refused("%s is not a jizhi.torch checkpoint" % path)
        for k, have in (("model", self.model), ("scaler", self.scaler),
                        ("scheduler", self.scheduler)):
            if have is not None and k not in st:
                raise _Refused("checkpoint %s has no %s state" % (path, k))
        try:
            if self.model is not None:
                self.model.load_state_dict(st["model"])
            self.optimizer.load_state_dict(st["optimizer"])
            if self.scaler is not None:
                self.scaler.load_state_dict(st["scaler"])
            if self.scheduler is not None:
                self.scheduler.load_state_dict(st["scheduler"])
            for k, v in self.extra_state.items():
                if k in st.get("extra", {}):
                    v.load_state_dict(st["extra"][k])
        except Exception as e:
            raise _Refused("cannot load checkpoint %s: %s" % (path, e))
        rng = st["rng"]
        ranks = st.get("rng_ranks")
        if ranks and len(ranks) == self.world_size:
            rng = ranks[self.rank]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        if "cuda" in rng and torch.cuda.is_available():
            try:
                torch.cuda.set_rng_state_all(rng["cuda"])
            except Exception:
                pass
        np = sys.modules.get("numpy")
        if np is not None and "numpy" in rng:
            np.random.set_state(rng["numpy"])
        self.global_step = int(st["step"])
        self._lr = float(st.get("lr", self._lr))
        self._lr_scale = float(st.get("lr_scale", 1.0))
        if st.get("b0") is not None:
            self._b0 = st["b0"]
        states = st.get("loaders", [])
        for ld, s in zip(self._loaders, states):
            ld.load_state_dict(s)
        self._loader_states = states
        self._loss_sum, self._loss_n = 0.0, 0

    # ---- instructions ---------------------------------------------------------

    def _sync(self):
        """Takes the pending instructions one by one and applies each on
        every rank, then sets the call of the next look. While paused, loops
        here."""
        if self.ddp:
            self._sync_ddp()
        else:
            while True:
                msg, ins = self._next()
                if msg is None:
                    if not self._paused:
                        break
                    time.sleep(_PAUSE_POLL_S)
                    continue
                self._finish(msg, ins, self._apply(msg), 0)
                if self.stopped:
                    break
        k = self.sync_every or self._sync_k
        self._sync_at = self._calls + k
        self._flag_due = False

    def _sync_ddp(self):
        """The DDP look (every rank, at the same call), in rounds. A round
        is a broadcast of the sync box from rank 0: the next instruction,
        or none and the steps to the next look (rank 0 waits for no one).
        A round that brought an instruction is followed at once by an
        all-reduce of the box: every rank adds whether it refused it, and
        rank 0 acknowledges it with that outcome before it polls the next
        one (libjizhi settles an instruction at the program's next call
        into it, so the ack comes first)."""
        box = self._box
        while True:
            head = [0, 0, 0, 0]
            data = ins = None
            if self.rank == 0:
                if self._stash is not None:
                    (msg, ins), self._stash = self._stash, None
                elif not self.stopped:
                    msg, ins = self._next()
                else:
                    msg = None
                if msg is not None:
                    data = json.dumps(msg, separators=(",", ":")).encode()
                    head[0] = len(data)
                elif not self._paused:
                    head[2] = self._cadence()
            if data is not None:
                box.copy_(torch.tensor(head + self._box_rest))
                if len(data) <= 8 * (_BOX_WORDS - _BOX_HEAD):
                    box[_BOX_HEAD:_BOX_HEAD + _words(len(data))] = _pack(data).to(box.device)
                self._box_k = None
            elif self.rank == 0 and self._box_k != head[2]:  # else the box holds it already
                if self._box_k is None:
                    box.copy_(torch.tensor(head + self._box_rest))
                else:
                    box[2] = head[2]
                self._box_k = head[2]
            dist.broadcast(box, 0)
            self.syncs += 1
            n, _, k, _ = box[:_BOX_HEAD].tolist()
            if n == 0:
                if self._paused and not self.stopped:
                    time.sleep(_PAUSE_POLL_S)
                    continue
                self._sync_k = max(1, min(_SYNC_K_MAX, int(k)))
                if self.rank == 0:
                    self._sync_t = time.perf_counter()
                return
            if n <= 8 * (_BOX_WORDS - _BOX_HEAD):
                words = box[_BOX_HEAD:_BOX_HEAD + _words(n)]
            else:  # too long for the box: a broadcast of its length
                words = torch.zeros(_words(n), dtype=torch.int64, device=box.device)
                if self.rank == 0:
                    words.copy_(_pack(data).to(box.device))
                dist.broadcast(words, 0)
                self._held = (words,)
                self.syncs += 1
            msg = json.loads(_unpack(words, n))
            detail = self._apply(msg)
            box.zero_()
            box[1] = 0 if detail is None else 1
            self._box_k = None
            dist.all_reduce(box)
            self.syncs += 1
            refused = int(box[1])
            if msg["kind"] == "load" and 0 < refused < self.world_size:
                self._diverged(msg, ins, detail)
            self._finish(msg, ins, detail, refused)
            if self.stopped:  # every rank applied the stop: nothing more to look at
                return

    def _diverged(self, msg, ins, detail):
        """A load that some ranks applied and others refused (`detail`,
        this rank's reason or None): the replicas now hold different weights
        and steps. Every rank raises JizhiError naming the ranks that
        failed, after rank 0 acknowledged the load as refused with it."""
        why = self._gather_obj(detail)
        failed = ["%d (%s)" % (r, d.replace("jizhi.torch: ", "", 1)[:200])
                  for r, d in enumerate(why) if d is not None]
        text = ("jizhi.torch: load of %s failed on %d of %d ranks, rank %s: the others "
                "loaded it, so the ranks hold different weights and steps; the trial "
                "cannot go on" % (msg["path"], len(failed), self.world_size,
                                  ", rank ".join(failed)))
        if ins is not None:
            self.trial.ack(ins, False, text)
        raise JizhiError(text)

    def _cadence(self):
        """Rank 0: steps to the next look, from the time per step since the
        last one: sync_ms of training, at least 1."""
        now = time.perf_counter()
        k = 1
        if self._sync_t is not None and self.sync_ms > 0:
            per = (now - self._sync_t) / self._sync_k
            if per > 0:
                k = int(self.sync_ms / 1000.0 / per)
        return max(1, min(_SYNC_K_MAX, k))

    def _finish(self, msg, ins, detail, refused):
        """Rank 0 acknowledges an applied instruction `ins`: refused when
        `detail` (this rank's reason) or `refused` (how many ranks refused)
        says so."""
        if refused and detail is None:
            detail = "jizhi.torch: refused on %d of %d ranks" % (refused, self.world_size)
        if ins is not None:
            if msg["kind"] == "checkpoint" and detail is None:
                pass  # checkpoint_done acknowledged it
            else:
                self.trial.ack(ins, detail is None, detail)

    def _next(self):
        """Rank 0: the next instruction as a plain dict and the Instruction
        (for its ack), or (None, None)."""
        if not self._lead:
            return None, None
        if self._fast is not None:
            if self._fast[0](self._fast[2], self._cins_ref) != 1:
                return None, None
            ins = Instruction(self._cins)
            self._cins = _CInstruction()  # the Instruction keeps the struct for its ack
            self._cins_ref = ctypes.byref(self._cins)
        else:
            ins = next(iter(self.trial.poll()), None)
            if ins is None:
                return None, None
        msg = {"kind": ins.kind, "id": ins.id, "name": ins.name, "value": ins.value,
               "path": ins.path}
        if ins.kind == "load":
            msg["params"] = self.trial.params
        return msg, ins

    def _apply(self, msg):
        """Applies one instruction on this rank. None, or why it was refused."""
        kind = msg["kind"]
        try:
            if "params" in msg:
                self.params = msg["params"]
            elif kind == "set":
                self.params = dict(self.params)
                self.params[msg["name"]] = msg["value"]
            if kind == "set":
                self._set(msg["name"], msg["value"])
            elif kind == "checkpoint":
                path = self.save()
                if self.rank == 0:
                    self._prune(path)
                    self.last_checkpoint = path
                    if self._lead:
                        self.trial.checkpoint_done(self.global_step, path)
            elif kind == "load":
                self._load(msg["path"])
                self._moved = True
                self._apply_params(self.params)
                self._say("loaded %s: at step %d" % (msg["path"], self.global_step))
            elif kind == "pause":
                self._paused = True
            elif kind == "resume":
                self._paused = False
            elif kind == "stop":
                self._paused = False
                self.stopped = True
            else:
                raise _Refused("jizhi.torch cannot apply %r" % kind)
        except _Refused as e:
            return "jizhi.torch: %s" % e
        except Exception as e:  # a failing save, a handler's error
            return "jizhi.torch: %s failed: %s: %s" % (kind, type(e).__name__, e)
        return None

    def _prune(self, path):
        if path in self._saved:
            self._saved.remove(path)
        self._saved.append(path)
        while self.keep_checkpoints is not None and len(self._saved) > self.keep_checkpoints:
            old = self._saved.pop(0)
            try:
                os.unlink(old)
            except OSError:
                pass

    def _apply_params(self, params):
        """After a load: the live params this module applies, on top."""
        for name in _BUILTIN:
            if name in params and name not in self.handlers:
                try:
                    self._set(name, params[name], quiet=True)
                except _Refused:
                    pass

    def _set(self, name, value, quiet=False):
        self._setter(name, value)()
        if not quiet:
            self._say("set %s=%r at step %d" % (name, value, self.global_step))

    def _setter(self, name, value):
        """Checks `set name=value` and returns the function that applies it
        (a handler is called then); raises _Refused, changing nothing."""
        groups = self.optimizer.param_groups
        if name in self.handlers:
            fn = self.handlers[name]

            def handle():
                if fn is not None and fn(value) is False:
                    raise _Refused("%s: the program's handler refused %r" % (name, value))
            return handle
        opt = type(self.optimizer).__name__
        if name == "lr":
            v = _number(name, value, 0, low_open=True)
            cls = type(self.scheduler).__name__ if self.scheduler is not None else ""
            if cls in ("OneCycleLR", "CyclicLR"):
                raise _Refused("lr: %s sets the rate itself; handle lr with handlers=" % cls)
            return lambda: self._set_lr(v, self._lr_scale)
        if name in ("momentum", "weight_decay", "eps"):
            low_open = name == "eps"
            v = _number(name, value, 0, low_open=low_open)
            if name == "momentum" and v >= 1:
                raise _Refused("momentum: %r is out of range (must be < 1)" % value)
            if any(name not in g for g in groups):
                hint = " (its betas[0] is: set beta1)" if name == "momentum" and \
                    all("betas" in g for g in groups) else ""
                raise _Refused("%s has no %s%s" % (opt, name, hint))

            def fields():
                for g in groups:
                    g[name] = v
            return fields
        if name in ("betas", "beta1", "beta2"):
            if any("betas" not in g for g in groups):
                raise _Refused("%s has no betas" % opt)
            if name == "betas":
                b = value
                if isinstance(value, str):
                    b = value.strip().strip("[]()").replace(",", " ").split()
                    try:
                        b = [float(x) for x in b]
                    except ValueError:
                        raise _Refused("betas: expected two numbers as 'b1,b2', got %r"
                                       % value)
                if not isinstance(b, (list, tuple)) or len(b) != 2:
                    raise _Refused("betas: expected two numbers as 'b1,b2', got %r" % (value,))
                b = [_number("betas", x, 0, 1, high_open=True) for x in b]

                def both():
                    for g in groups:
                        g["betas"] = (b[0], b[1])
                return both
            v = _number(name, value, 0, 1, high_open=True)
            k = 0 if name == "beta1" else 1

            def one():
                for g in groups:
                    b = list(g["betas"])
                    b[k] = v
                    g["betas"] = tuple(b)
            return one
        if name == "batch_size":
            v = _number(name, value, 1)
            if v != int(v):
                raise _Refused("batch_size: %r is not an integer" % value)
            if not self._loaders:
                raise _Refused("batch_size: the program reads no ctl.loader to rebuild "
                               "(pass handlers={'batch_size': fn} to attach)")
            return lambda: self._set_batch_size(int(v))
        raise _Refused("no handler for parameter %r (jizhi.torch applies %s; pass "
                       "handlers={%r: fn} to attach)" % (name, ", ".join(_BUILTIN), name))

    def _set_batch_size(self, v):
        for ld in self._loaders:
            if ld.batch_size != v:
                ld.batch_size = v
                ld._version += 1
        scale = _lr_gain(self.lr_scaling, self._b0, v, self.noise_scale)
        if scale != self._lr_scale:
            self._set_lr(self._lr, scale)

    def _bases(self):
        bl = getattr(self.scheduler, "base_lrs", None)
        if bl is not None and len(bl) == len(self.optimizer.param_groups):
            return [float(b) for b in bl]
        return [float(g["lr"]) for g in self.optimizer.param_groups]

    def _set_lr(self, lr, scale):
        """Sets the lr param (group 0's base rate before lr_scaling) and the
        scaling: every group's base is lr x its ratio x scale; with a
        scheduler its base_lrs change and each group's current rate keeps
        its ratio to the base (the schedule's factor)."""
        groups = self.optimizer.param_groups
        bl = getattr(self.scheduler, "base_lrs", None)
        if bl is not None and len(bl) != len(groups):
            bl = None
        for i, g in enumerate(groups):
            new = lr * self._ratio[i] * scale
            if bl is not None:
                old = float(bl[i])
                factor = g["lr"] / old if old else 1.0
                bl[i] = new
                g["initial_lr"] = new
                g["lr"] = new * factor
            else:
                g["lr"] = new
        self._lr = lr
        self._lr_scale = scale

    # ---- helpers --------------------------------------------------------------

    def _gather_obj(self, obj):
        """Every rank's obj, in rank order: dist.all_gather_object's result
        over tensors kept in self._held (all_gather_object's own are dropped
        by gloo's workers)."""
        data = pickle.dumps(obj)
        n = torch.tensor([len(data)], dtype=torch.int64, device=self._dev)
        ns = [torch.zeros_like(n) for _ in range(self.world_size)]
        dist.all_gather(ns, n)
        lens = [int(x.item()) for x in ns]
        mine = torch.zeros(_words(max(lens)), dtype=torch.int64, device=self._dev)
        mine[:_words(len(data))] = _pack(data).to(self._dev)
        every = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(every, mine)
        self._held = (n, ns, mine, every)
        return [pickle.loads(bytes(w.cpu().view(torch.uint8).tolist()[:k]))
                for w, k in zip(every, lens)]

    def _bcast(self, obj):
        """Rank 0's obj on every rank: dist.broadcast_object_list's result
        over tensors kept in self._held, as _gather_obj."""
        data = pickle.dumps(obj) if self.rank == 0 else b""
        n = torch.tensor([len(data)], dtype=torch.int64, device=self._dev)
        dist.broadcast(n, 0)
        k = int(n.item())
        words = torch.zeros(_words(k), dtype=torch.int64, device=self._dev)
        if self.rank == 0:
            words.copy_(_pack(data).to(self._dev))
        dist.broadcast(words, 0)
        self._held = (n, words)
        return pickle.loads(bytes(words.cpu().view(torch.uint8).tolist()[:k]))

    def _report(self, metrics):
        """Reports this step's train metrics from rank 0 (every rank resets
        the loss's mean)."""
        n = self._loss_n
        loss = self._loss_sum
        self._loss_sum, self._loss_n = 0.0, 0
        if self.rank != 0 or self.trial is None:
            return
        now = time.perf_counter()
        vals = {}
        if n:
            vals["train_loss"] = float(loss) / n
        vals["lr"] = float(self.optimizer.param_groups[0]["lr"])
        if self._loaders:
            vals["batch_size"] = float(self._loaders[0].batch_size)
        steps = self.global_step - self._step_last
        if steps > 0:
            vals["step_time_s"] = (now - self._t_last) / steps
        self._t_last, self._step_last = now, self.global_step
        for k, v in (metrics or {}).items():
            vals[k] = float(v.item() if torch.is_tensor(v) else v)
        self._put(vals)

    def _put(self, vals, step=None):
        """Rank 0: queues the points of `vals` at `step` (default: the
        current one; through libjizhi directly for a real trial: each name
        is checked once). While the flag's hook holds an instruction open
        (_stash), they wait in _later for the look that acknowledges it: a
        call into libjizhi would settle it first."""
        step = self.global_step if step is None else step
        if self._stash is not None:
            self._later.append((vals, step))
            return True
        if self._fast is None:
            return self.trial.report(step, **vals)
        report, h, ok = self._fast[1], self._fast[2], True
        for k, v in vals.items():
            name = self._names.get(k)
            if name is None:
                self.trial.report(step, **{k: v})  # checks the name, or raises
                self._names[k] = k.encode()
                continue
            if report(h, step, name, v) != 0:
                ok = False
        return ok

    def _put_later(self):
        """Rank 0, after the look: the reports _put kept while an
        instruction was open, in their order (and their flush)."""
        later, self._later = self._later, []
        for vals, step in later:
            self._put(vals, step)
        if self._flush_later:
            self._flush_later = False
            if self._lead:
                self.trial.flush(2000)

    def _say(self, text):
        if os.environ.get("JIZHI_TORCH_QUIET"):
            return
        who = "rank %d: " % self.rank if self.ddp else ""
        print("jizhi.torch: %s%s" % (who, text), file=sys.stderr, flush=True)
