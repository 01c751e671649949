"""jizhi.torch's DDP sync protocol (trial_helper/python/jizhi/torch.py),
unit by unit, on two gloo ranks and no daemons: rank 0's trial is a
scripted stand-in that hands out instructions at given calls and records
the acknowledgements.

- Every instruction is applied on both ranks at the same step, several in
  one look, a refusal on rank 1 alone refuses it (with the count), a load
  whose params do not fit the sync box arrives whole, stop ends both ranks
  at the same step.
- The cadence: with sync_every=4 the ranks meet exactly at calls 1, 5, 9...
  in one broadcast each (then per instruction applied an all-reduce
  carrying the refusals and a broadcast of the next); with sync_ms the looks are spaced by rank
  0's measured step time, so a step without an instruction costs no
  collective most of the time.

Runs Debian's /usr/bin/python3 (python3-torch); skips without it.
"""
import json
import os
import socket
import subprocess
import textwrap

import pytest

from torchutil import PY, needs_torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = needs_torch("torch.distributed")

RANK = textwrap.dedent("""
    import gc, json, os, sys, time, types, weakref
    import torch, torch.distributed as dist
    import jizhi.torch

    class Fake:
        # rank 0's trial: instructions become pollable at a given call. As
        # libjizhi, it holds one instruction open from its poll to its ack:
        # any other call settles it (recorded in `settled`) and a later ack
        # of it fails (recorded in `late`)
        standalone = False
        def __init__(self, script, ckdir):
            self.script = script  # [(call, kind, name, value, path)]
            self.calls = 0
            self.acks, self.done, self.reports = [], [], []
            self.open, self.settled, self.late, self.ids = None, [], [], 0
            self.log = []  # [call, "report" or "ack", step or id] in the helper's order
            self.params = {"lr": 0.1}
            self.checkpoint_dir = ckdir
        def settle(self):
            if self.open is not None:
                self.settled.append([self.open.id, self.open.kind])
                self.open = None
        def poll(self):
            self.settle()
            while self.script and self.script[0][0] <= self.calls:
                c, kind, name, value, path = self.script.pop(0)
                self.ids += 1
                i = types.SimpleNamespace(kind=kind, id=self.ids,
                                          name=name, value=value, path=path)
                if kind == "set":
                    self.params[name] = value
                if kind == "load":
                    self.params.update({"k%03d" % j: j for j in range(120)})
                self.open = i
                yield i
                self.settle()
        def ack(self, ins, applied=True, detail=None):
            if self.open is None or self.open.id != ins.id:
                self.late.append([ins.id, ins.kind])
                return False
            self.open = None
            self.acks.append([ins.id, ins.kind, ins.name, bool(applied), detail])
            self.log.append([self.calls, "ack", ins.id])
            return True
        def report(self, step, **vals):
            self.settle()
            self.reports.append([step, sorted(vals)])
            self.log.append([self.calls, "report" if "lr" in vals else "eval", step])
            return True
        def checkpoint_done(self, step, path):
            if self.open is not None and self.open.kind == "checkpoint":
                self.open = None  # acknowledged by it
            self.settle()
            self.done.append([step, os.path.basename(path)])
            return True
        def flush(self, timeout_ms=10000):
            self.settle()
            return True

    threads0 = len(os.listdir("/proc/self/task"))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    out = {}
    def own_hook(state, bucket):  # a user's own hook: DDP's mean, done here
        buf = bucket.buffer().div_(2)
        dist.all_reduce(buf)
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut

    def run_case(case):
        # wide: several buckets (2.5 MB of layers of 0.36 MB against DDP's
        # first bucket of 1 MB)
        wide = case.get("wide")
        model = (torch.nn.Sequential(torch.nn.Linear(3, 300),
                                     *[torch.nn.Linear(300, 300) for _ in range(7)],
                                     torch.nn.Linear(300, 2)) if wide else torch.nn.Linear(3, 2))
        twin = None  # wide: the same model under DDP's own all-reduce, for its gradients
        if wide:
            twin = torch.nn.Sequential(*[torch.nn.Linear(l.in_features, l.out_features)
                                         for l in model])
            twin.load_state_dict(model.state_dict())
            twin = torch.nn.parallel.DistributedDataParallel(twin)
        if case.get("ddp"):  # a backward with DDP's all-reduce before each step
            model = torch.nn.parallel.DistributedDataParallel(model)
            if case.get("own_hook"):
                model.register_comm_hook(None, own_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        fake = Fake([tuple(x) for x in case["script"]], os.environ["CKDIR"]) if rank == 0 else None
        refuse = (lambda v: rank != 1)  # rank 1 refuses `set dropout`
        class Extra:  # rank 1 cannot load its state (a load that fails there alone)
            def state_dict(self):
                return {"rank": rank}
            def load_state_dict(self, st):
                if rank == 1:
                    raise ValueError("no state for rank 1")
        extra = {"x": Extra()} if case.get("extra") else None
        ctl = jizhi.torch.attach(fake, opt, model=model, report_every=case.get("report_every", 0),
                                 handlers={"dropout": refuse}, extra_state=extra, **case["opts"])
        seen, looks, grad1, gap, error = [], [], None, 0.0, None
        for call in range(1, case["calls"] + 1):
            if fake is not None:
                fake.calls = call
            if case.get("ddp"):
                opt.zero_grad()
                x = torch.ones(4, 3) * (rank + 1) + (call - 1)
                model(x).sum().backward()
                if grad1 is None and not wide:
                    grad1 = model.module.weight.grad.tolist()
                if twin is not None:
                    twin.zero_grad()
                    twin(x).sum().backward()
                    gap = max([gap] + [(p.grad - q.grad).abs().max().item() for p, q in
                                       zip(model.parameters(), twin.parameters())])
            if case.get("eval"):  # between backward and ctl.step (rank 0 alone reports)
                ctl.report_eval(val_acc=call)
            before = ctl.syncs
            try:
                ok = ctl.step()
            except jizhi.JizhiError as e:
                error = str(e)
                break
            g = opt.param_groups[0]
            seen.append([ctl.global_step, g["lr"], g["momentum"]])
            if ctl.syncs != before:
                looks.append([call, ctl.syncs - before])
            if not ok:
                break
            time.sleep(case.get("sleep", 0))
        again = None  # a second attach on the same model takes the hook over
        if case["opts"].get("grad_flag"):
            fake2 = Fake([(1, "set", "lr", 0.7, None)], os.environ["CKDIR"]) if rank == 0 else None
            ctl2 = jizhi.torch.attach(fake2, opt, model=model, report_every=0)
            for call in (1, 2):
                if fake2 is not None:
                    fake2.calls = call
                opt.zero_grad()
                model(torch.ones(4, 3)).sum().backward()
                ctl2.step()
            again = {"lr": opt.param_groups[0]["lr"], "looks_by": ctl2.looks_by,
                     "acks": fake2.acks if fake2 else None, "old": ctl._inline}
        first = getattr(getattr(model, "_jizhi_flag", None), "both", None)
        return {"seen": seen, "looks": looks, "params": ctl.params, "grad1": grad1,
                "looks_by": ctl.looks_by, "gap": gap,
                "first": None if first is None else first.numel(),
                "floats": sum(p.numel() for p in model.parameters()),
                "acks": fake.acks if fake else None,
                "done": fake.done if fake else None, "again": again,
                "order": [fake.settled, fake.late] if fake else None,
                "reports": fake.reports if fake else None,
                "log": fake.log if fake else None, "error": error}

    def sparse():
        # sparse gradients (an Embedding with sparse=True) cannot carry the flag:
        # the cadence by default, a ValueError when the flag is asked for
        emb = torch.nn.parallel.DistributedDataParallel(torch.nn.Embedding(10, 4, sparse=True))
        c = jizhi.torch.attach(None, torch.optim.SGD(emb.parameters(), lr=0.1), model=emb)
        emb(torch.tensor([1, 2])).sum().backward()
        got = {"looks_by": c.looks_by}
        try:
            jizhi.torch.attach(None, torch.optim.SGD(emb.parameters(), lr=0.1), model=emb,
                               grad_flag=True)
        except ValueError as e:
            got["insist"] = str(e)
        return got

    def dropped():
        # a controller in a reference cycle (the user's: c.me = c) let go
        # of while training goes on with the model: rank 0's collector frees
        # it before the next backward, rank 1's in the middle of one;
        # every rank still all-reduces the same sizes, and the gradients are
        # DDP's mean (a twin under DDP's own all-reduce)
        layers = lambda: torch.nn.Sequential(torch.nn.Linear(3, 300),
                                             *[torch.nn.Linear(300, 300) for _ in range(7)],
                                             torch.nn.Linear(300, 2))
        model = layers()
        twin = layers()
        twin.load_state_dict(model.state_dict())
        model = torch.nn.parallel.DistributedDataParallel(model)
        twin = torch.nn.parallel.DistributedDataParallel(twin)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        def attached():
            c = jizhi.torch.attach(None, opt, model=model, report_every=0)
            c.me = c
            opt.zero_grad()
            model(torch.ones(4, 3)).sum().backward()
            c.step()
            return c.looks_by, weakref.ref(c)
        gc.disable()
        looks_by, ref = attached()
        if rank == 0:
            gc.collect()
        else:
            model.module[0].weight.register_hook(lambda g: (gc.collect(), g)[1])
        alive = ref() is not None
        x = torch.ones(4, 3) * (rank + 1)
        for m in (model, twin):
            m.zero_grad()
            m(x).sum().backward()
        gc.enable()
        gc.collect()
        gap = max((p.grad - q.grad).abs().max().item()
                  for p, q in zip(model.parameters(), twin.parameters()))
        return {"looks_by": looks_by, "alive_at_backward": alive, "gone": ref() is None,
                "gap": gap}

    def raised():
        # a backward that raised after bucket 0's all-reduce had started
        # (a hook on the first layer, the last bucket): its all-reduces are
        # left in flight, and nothing of the hook's may keep the controller
        # (and with it the model and the group) alive
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
            torch.nn.Linear(3, 300), *[torch.nn.Linear(300, 300) for _ in range(7)],
            torch.nn.Linear(300, 2)))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        class Boom(Exception):
            pass
        def boom(g):
            raise Boom()
        def attached():
            c = jizhi.torch.attach(None, opt, model=model, report_every=0)
            c.me = c  # a cycle: only the collector frees it
            model(torch.ones(4, 3)).sum().backward()
            c.step()
            h = model.module[0].weight.register_hook(boom)
            try:
                model(torch.ones(4, 3)).sum().backward()
            except Boom:
                pass
            h.remove()
            return weakref.ref(c), len(model._jizhi_flag.inflight)
        ref, inflight = attached()
        gc.collect()
        return {"inflight": inflight, "gone": ref() is None}

    # The models, their DDP reducers and hooks hold the process group: they
    # go first (each case's die with run_case), so destroy_process_group()
    # joins gloo's threads while the interpreter is whole. (A group left to
    # finalisation: a gloo worker that drops the last reference to a tensor
    # made in Python aborts the process there, "terminate called without an
    # active exception".) The threads counted after it: as before the group.
    for case in json.loads(os.environ["CASES"]):
        out[case["name"]] = run_case(case)
    out["sparse"] = sparse()
    out["dropped"] = dropped()
    out["raised"] = raised()
    gc.collect()
    dist.destroy_process_group()
    gc.collect()
    out["threads"] = [threads0, len(os.listdir("/proc/self/task"))]
    with open(os.environ["OUT"] + ".%d" % rank, "w") as f:
        json.dump(out, f)
""")


def run_ranks(tmp_path, cases):
    prog = tmp_path / "rank.py"
    prog.write_text(RANK)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = str(tmp_path / "out")
    procs = []
    for r in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("JIZHI_")}
        env.update(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PYTHONPATH=os.path.join(ROOT, "trial_helper", "python"),
                   JIZHI_TORCH_QUIET="1", CASES=json.dumps(cases), OUT=out,
                   CKDIR=str(tmp_path), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([PY, str(prog)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        for p in procs:
            text = p.communicate(timeout=120)[0]
            assert p.returncode == 0, text
    finally:
        for q in procs:  # a rank whose peer failed would wait for it
            if q.poll() is None:
                q.kill()
                q.wait()
    return [json.loads(open(out + ".%d" % r).read()) for r in (0, 1)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """One pair of rank processes runs every case (a start costs seconds)."""
    tmp = tmp_path_factory.mktemp("sync")
    ck = str(tmp / "ckpt-2.pt")
    script = [[3, "set", "lr", 0.5, None], [3, "set", "momentum", 0.7, None],
              [6, "set", "dropout", 0.5, None], [7, "checkpoint", "", None, None],
              [9, "set", "lr", 0.25, None], [12, "stop", "", None, None]]
    cases = [{"name": "each", "calls": 40, "opts": {"sync_every": 1}, "script": script},
             {"name": "every4", "calls": 40, "opts": {"sync_every": 4},
              "script": [[6, "set", "lr", 0.3, None], [14, "stop", "", None, None]]},
             {"name": "ms", "calls": 80, "sleep": 0.002, "opts": {"sync_ms": 30},
              "script": [[30, "set", "lr", 0.2, None]]},
             {"name": "grad", "calls": 40, "ddp": True, "opts": {"grad_flag": True},
              "script": [[6, "set", "lr", 0.3, None], [14, "stop", "", None, None]]},
             {"name": "auto", "calls": 12, "ddp": True, "wide": True, "opts": {},
              "script": [[4, "set", "lr", 0.3, None], [6, "set", "dropout", 0.5, None],
                         [9, "set", "lr", 0.2, None], [11, "set", "lr", 0.15, None],
                         [11, "set", "momentum", 0.5, None]]},
             {"name": "own", "calls": 12, "ddp": True, "own_hook": True, "opts": {"sync_ms": 0},
              "script": [[4, "set", "lr", 0.3, None]]},
             {"name": "load", "calls": 6, "opts": {"sync_every": 1},
              "script": [[2, "checkpoint", "", None, None], [4, "load", "", None, ck]]},
             {"name": "order", "calls": 12, "ddp": True, "report_every": 2, "opts": {},
              "eval": True,
              "script": [[2, "set", "lr", -1, None], [2, "set", "lr", 0.3, None],
                         [3, "set", "bogus", 1, None], [4, "checkpoint", "", None, None],
                         [6, "load", "", None, str(tmp / "ckpt-5.pt")],
                         [8, "pause", "", None, None], [8, "set", "lr", 0.2, None],
                         [8, "set", "dropout", 0.5, None], [8, "resume", "", None, None]]},
             {"name": "every1", "calls": 8, "ddp": True, "report_every": 1, "opts": {},
              "script": [[3, "set", "lr", 0.3, None], [5, "stop", "", None, None]]},
             {"name": "split", "calls": 6, "extra": True, "opts": {"sync_every": 1},
              "script": [[3, "checkpoint", "", None, None],
                         [4, "load", "", None, str(tmp / "ckpt-3.pt")]]}]
    return run_ranks(tmp, cases)


def test_instructions_apply_on_both_ranks_at_one_step_in_one_broadcast(ranks):
    r0, r1 = ranks

    # every call, both ranks: the same steps, rates and momenta
    each0, each1 = r0["each"], r1["each"]
    assert each0["seen"] == each1["seen"]
    steps = {s: (lr, m) for s, lr, m in each0["seen"]}
    assert steps[2] == (0.1, 0.9) and steps[3] == (0.5, 0.7)  # two in one look
    assert steps[9] == (0.25, 0.7)
    assert each0["seen"][-1][0] == 12 and len(each1["seen"]) == 12  # stopped at 12 on both
    # one broadcast per look; a look that applies k instructions adds k
    # all-reduces (each one's refusals, acknowledged before rank 0 polls
    # again) and k broadcasts (the next one, or none); a stop ends the look
    looks = dict((c, n) for c, n in each0["looks"])
    assert looks == dict((c, n) for c, n in each1["looks"])
    assert [c for c in range(1, 13) if c not in looks] == []
    assert looks[1] == 1 and looks[2] == 1 and looks[3] == 5 and looks[12] == 2
    acks = each0["acks"]
    assert [a[1:4] for a in acks] == [["set", "lr", True], ["set", "momentum", True],
                                      ["set", "dropout", False], ["set", "lr", True],
                                      ["stop", "", True]]
    assert acks[2][4] == "jizhi.torch: refused on 1 of 2 ranks"
    assert each0["done"] == [[7, "ckpt-7.pt"]]
    assert each1["acks"] is None

    # sync_every=4: looks at calls 1, 5, 9, 13; the set polled at 6 is applied at 9
    ev0, ev1 = r0["every4"], r1["every4"]
    assert ev0["looks"] == ev1["looks"] == [[1, 1], [5, 1], [9, 3], [13, 1], [17, 2]]
    lr0 = {s: lr for s, lr, _ in ev0["seen"]}
    assert lr0[8] == 0.1 and lr0[9] == 0.3 and ev0["seen"] == ev1["seen"]
    assert len(ev0["seen"]) == len(ev1["seen"]) == 17

    # sync_ms=30 with steps of at least 2 ms: rank 0 spaces the looks by its
    # step time, never more than 30 / 2 = 15 steps apart
    ms0, ms1 = r0["ms"], r1["ms"]
    assert ms0["looks"] == ms1["looks"] and ms0["seen"] == ms1["seen"]
    gaps = [b[0] - a[0] for a, b in zip(ms0["looks"], ms0["looks"][1:])]
    assert len(ms0["looks"]) <= 80 // 2 and 3 <= max(gaps) <= 15, ms0["looks"]
    first = next(s for s, lr, _ in ms0["seen"] if lr == 0.2)
    assert first >= 30 and first in [c for c, _ in ms0["looks"]]
    assert ms1["params"]["lr"] == 0.2


def test_the_flag_is_the_default_under_ddp(ranks):
    # attach() with model= a DDP module and no options looks by the flag.
    # `set`s of built-in names ride on DDP's all-reduce themselves: applied
    # on both ranks at the call whose backward took them (4, 9, and 11 with
    # two at once), no collective of jizhi.torch; a set for a handler
    # (dropout, refused on rank 1) is a look at its call (6: the broadcast,
    # the all-reduce of the refusals, a broadcast of none). The hook's gradients are DDP's
    # own, bucket by bucket, on a model that DDP splits into several
    # buckets (compared with a twin under DDP's all-reduce at every call)
    r0, r1 = ranks
    a0, a1 = r0["auto"], r1["auto"]
    assert a0["looks_by"] == a1["looks_by"] == "flag"
    assert a0["looks"] == a1["looks"] == [[6, 3]], a0["looks"]
    steps = {s: (lr, m) for s, lr, m in a0["seen"]}
    assert a0["seen"] == a1["seen"]
    assert steps[3] == (0.1, 0.9) and steps[4] == (0.3, 0.9) and steps[8] == (0.3, 0.9)
    assert steps[9] == (0.2, 0.9) and steps[10] == (0.2, 0.9) and steps[11] == (0.15, 0.5)
    assert [a[1:4] for a in a0["acks"]] == [["set", "lr", True], ["set", "dropout", False],
                                            ["set", "lr", True], ["set", "lr", True],
                                            ["set", "momentum", True]]
    assert a0["acks"][1][4] == "jizhi.torch: refused on 1 of 2 ranks"
    assert a0["gap"] == a1["gap"] == 0.0
    assert a0["first"] - 122 < a0["floats"] // 2, (a0["first"], a0["floats"])  # 2+ buckets
    # a model with a communication hook of the user's: the cadence (here
    # sync_ms 0, a look at every call), no error
    o0, o1 = r0["own"], r1["own"]
    assert o0["looks_by"] == o1["looks_by"] == "cadence"
    assert o0["seen"] == o1["seen"] and {s: lr for s, lr, _ in o0["seen"]}[4] == 0.3
    assert len(o0["looks"]) == 12  # sync_ms 0: a look at every call
    assert [a[1:4] for a in o0["acks"]] == [["set", "lr", True]]
    # sparse gradients: the cadence; the flag insisted on is refused
    assert r0["sparse"]["looks_by"] == r1["sparse"]["looks_by"] == "cadence"
    assert r0["sparse"]["insist"] == ("jizhi.torch.attach: grad_flag: the model has sparse "
                                      "gradients")
    # the other cases: sync_every given, or no DDP module: the cadence
    assert r0["each"]["looks_by"] == r0["load"]["looks_by"] == "cadence"


def test_a_controller_let_go_of_mid_training_leaves_ddps_mean(ranks):
    d0, d1 = ranks[0]["dropped"], ranks[1]["dropped"]
    assert d0["looks_by"] == d1["looks_by"] == "flag"
    assert d0["alive_at_backward"] is False and d1["alive_at_backward"] is True  # as arranged
    assert d0["gone"] and d1["gone"]
    assert d0["gap"] < 1e-6 and d1["gap"] < 1e-6, (d0, d1)


def test_a_backward_that_raised_keeps_no_controller_alive(ranks):
    for g in ranks:
        assert g["raised"]["inflight"] >= 1 and g["raised"]["gone"], g["raised"]


def test_every_model_and_controller_let_go_of_the_group(ranks):
    # after the cases (DDP models with the flag hook, a second attach, the
    # user's own hook) and destroy_process_group(), gloo's threads are gone:
    # nothing (a hook's state held by DDP's reducer, say) kept the group alive
    # into the interpreter's finalisation
    for g in ranks:
        before, after = g["threads"]
        assert after == before, g["threads"]


def test_a_load_too_long_for_the_box_arrives_whole(ranks):
    # a checkpoint at call 2, then a load of it whose params (120 more keys)
    # take a second broadcast; both ranks end up with the same params
    r0, r1 = ranks
    l0, l1 = r0["load"], r1["load"]
    assert l0["params"] == l1["params"] and len(l1["params"]) == 121
    assert [a[1:4] for a in l0["acks"]] == [["load", "", True]]
    # the box, its long text, the refusals, the box again (none)
    assert dict(l0["looks"])[4] == 4 and dict(l1["looks"])[4] == 4
    assert [s for s, _, _ in l0["seen"]] == [1, 2, 3, 2, 3, 4] == [s for s, _, _ in l1["seen"]]


def test_grad_flag_looks_only_when_an_instruction_waits(ranks):
    # attach(grad_flag=True): rank 0's "an instruction waits" rides on DDP's
    # gradient all-reduce, so the ranks meet only at the call where one was
    # taken (14: the stop), at that very call, in one broadcast and one
    # all-reduce; the set at 6 rode on the all-reduce itself; no collective
    # of jizhi.torch on the other calls
    r0, r1 = ranks
    g0, g1 = r0["grad"], r1["grad"]
    assert g0["looks"] == g1["looks"] == [[14, 2]], g0["looks"]
    lr0 = {s: lr for s, lr, _ in g0["seen"]}
    assert lr0[5] == 0.1 and lr0[6] == 0.3 and g0["seen"] == g1["seen"]
    assert len(g0["seen"]) == len(g1["seen"]) == 14  # stopped at 14 on both
    assert [a[1:4] for a in g0["acks"]] == [["set", "lr", True], ["stop", "", True]]
    # the hook still averages the gradients as DDP does: inputs of ones on
    # rank 0 and twos on rank 1, a batch of 4, so d(sum)/dW = 4 * 1.5
    assert g0["grad1"] == g1["grad1"] == [[6.0, 6.0, 6.0], [6.0, 6.0, 6.0]]
    # torch takes one hook per model: a second attach to the same model
    # takes ours over (its set applied, acknowledged to its trial); the
    # first controller gets nothing more
    for g in (g0, g1):
        assert g["again"]["lr"] == 0.7 and g["again"]["looks_by"] == "flag"
        assert g["again"]["old"] == []
    assert [a[1:4] for a in g0["again"]["acks"]] == [["set", "lr", True]]


EXIT = textwrap.dedent("""
    import torch, torch.distributed as dist
    import jizhi.torch
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ctl = jizhi.torch.attach(None, opt, model=model, report_every=0)
    assert ctl.looks_by == "flag"
    for _ in range(20):
        opt.zero_grad()
        model(torch.randn(8, 10)).sum().backward()
        opt.step()
        ctl.step()
    dist.destroy_process_group()
""")


def test_ranks_with_the_flag_hook_exit_cleanly(tmp_path):
    # The flag's hook hands gloo no Python callback: with one (Future.then,
    # as DDP's own Python hooks do) torch 1.13 aborted a rank at exit about
    # once in six processes ("terminate called without an active
    # exception", status -6). Twelve rank processes, six pairs, three at a
    # time: the callback version failed this in most runs.
    prog = tmp_path / "exit.py"
    prog.write_text(EXIT)
    for batch in range(2):
        procs = []
        for pair in range(3):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            for r in range(2):
                env = {k: v for k, v in os.environ.items() if not k.startswith("JIZHI_")}
                env.update(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port), OMP_NUM_THREADS="1", JIZHI_TORCH_QUIET="1",
                           PYTHONPATH=os.path.join(ROOT, "trial_helper", "python"))
                procs.append(subprocess.Popen([PY, str(prog)], env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
        for p in procs:
            text = p.communicate(timeout=120)[0]
            assert p.returncode == 0, (p.returncode, text)


def test_rank_0_acknowledges_each_instruction_before_it_calls_the_helper_again(ranks):
    # libjizhi settles an instruction at the program's next call into it
    # (set as applied, load as refused, pause by blocking): rank 0 must ack
    # each with the ranks' outcome first. The flag's inline sets are
    # checked and acknowledged as rank 0 takes them (lr=-1 refused with its
    # reason, not carried); an unknown name, a checkpoint, a load, and a
    # pause with a set and a refused set applied while paused, each
    # acknowledged at its look; report_eval called between backward() and
    # ctl.step waits for the look; the stand-in trial records any
    # instruction settled by another call, or acknowledged after that
    r0, r1 = ranks
    o0, o1 = r0["order"], r1["order"]
    assert o0["order"] == [[], []], o0["order"]
    assert o0["seen"] == o1["seen"]
    assert [a[1:] for a in o0["acks"]] == [
        ["set", "lr", False, "jizhi.torch: lr: -1 is out of range (must be > 0)"],
        ["set", "lr", True, None],
        ["set", "bogus", False, "jizhi.torch: no handler for parameter 'bogus' (jizhi.torch "
         "applies lr, momentum, weight_decay, betas, beta1, beta2, eps, batch_size; pass "
         "handlers={'bogus': fn} to attach)"],
        ["load", "", True, None], ["pause", "", True, None], ["set", "lr", True, None],
        ["set", "dropout", False, "jizhi.torch: refused on 1 of 2 ranks"],
        ["resume", "", True, None]]
    # a step's report (of steps before any change made at it) reaches the
    # helper before anything applied at that step is acknowledged: the
    # hook takes nothing in the backward of a step that reports (every 2
    # here), so what arrived at calls 2, 4, 6 and 8 is taken at the next one
    log = o0["log"]
    for call in {c for c, what, _ in log if what == "report"}:
        mine = [what for c, what, _ in log if c == call and what != "eval"]
        assert mine[0] == "report", (call, log)
    assert [c for c, what, _ in log if what == "ack"] == [3, 3, 3, 7, 9, 9, 9, 9]
    assert o0["done"] == [[5, "ckpt-5.pt"]]
    assert o0["seen"][-1][1] == 0.2 and o1["params"]["lr"] == 0.2
    assert [s for c, what, s in log if what == "report"] == [2, 4, 6, 6, 8, 10]
    assert len([1 for c, what, _ in log if what == "eval"]) == 12  # none lost


def test_with_a_report_at_every_step_the_flag_looks_after_each_report(ranks):
    # report_every=1: every backward precedes a report, so the hook takes
    # nothing; from the second step on each step looks after its report
    r0, r1 = ranks
    e0, e1 = r0["every1"], r1["every1"]
    assert e0["looks_by"] == e1["looks_by"] == "flag"
    assert e0["seen"] == e1["seen"] and len(e0["seen"]) == 5  # the stop at 5
    assert {s: lr for s, lr, _ in e0["seen"]}[3] == 0.3
    assert [c for c, _ in e0["looks"]] == [2, 3, 4, 5] == [c for c, _ in e1["looks"]]
    assert e0["log"] == [[1, "report", 1], [2, "report", 2], [3, "report", 3], [3, "ack", 1],
                         [4, "report", 4], [5, "report", 5], [5, "ack", 2]]
    assert e0["order"] == [[], []]


def test_a_load_that_fails_on_some_ranks_fails_every_rank(ranks):
    # rank 1 cannot load its extra_state while rank 0 loaded the
    # checkpoint: training on would run diverged replicas, so every rank
    # raises, naming the rank and its reason, and rank 0 acknowledges the
    # load refused with the same text
    r0, r1 = ranks
    s0, s1 = r0["split"], r1["split"]
    assert s0["error"] == s1["error"]
    assert s0["error"].startswith("jizhi.torch: load of ") and " failed on 1 of 2 ranks, " \
        "rank 1 (cannot load checkpoint " in s0["error"], s0["error"]
    assert s0["error"].endswith("no state for rank 1): the others loaded it, so the ranks "
                                "hold different weights and steps; the trial cannot go on")
    assert len(s0["seen"]) == len(s1["seen"]) == 3  # raised at the fourth call's look
    assert [a[1:] for a in s0["acks"]] == [["load", "", False, s0["error"]]]
