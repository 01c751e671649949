"""Data-parallel jizhi-train under real MPI ranks (mpirun, oversubscribed on
this small machine): N ranks train the same model as 1 rank, hierarchical
equals flat, per-rank BatchNorm, the comm layer's own checks, and a live set
that reaches every rank at one step. Skipped when mpirun is not installed."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD, env_for_trials

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (openmpi-bin)")

TRAIN = os.path.join(BUILD, "bin", "jizhi-train")
COMM_TEST = os.path.join(BUILD, "tests", "test_trn_comm")
MLP = ["--train-subset", "4000", "--val-size", "1000", "--hidden", "64", "--epochs", "100",
       "--max-steps", "200", "--batch-size", "100", "--log-every", "50", "--eval-every", "200",
       "--threads", "1"]


def mpi_env():
    e = env_for_trials()
    e["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    e["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    e["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    return e


def run(np_, *args, prog=TRAIN, timeout=240):
    cmd = [prog, *args] if np_ == 0 else [MPIRUN, "--oversubscribe", "-np", str(np_), prog, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def reported(stderr, name):
    return [float(v) for v in re.findall(r"jizhi: step \d+ %s=(\S+)" % re.escape(name), stderr)]


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b))


@pytest.fixture(scope="module")
def one_rank():
    return run(0, *MLP)


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_comm_layer_under_mpi(np_):
    p = run(np_, "--mpi", prog=COMM_TEST)
    lines = re.findall(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", p.stdout, re.M)
    assert len(lines) == np_, p.stdout  # every rank reports
    assert all(int(f) == 0 and int(ok) > 0 and int(sk) == 0 for ok, f, sk in lines), p.stdout


@pytest.mark.parametrize("np_,extra", [
    (2, []),
    (4, []),
    (2, ["--allreduce", "native"]),
    (4, ["--overlap", "0", "--fusion-kb", "0"]),
    (4, ["--fusion-kb", "64"]),
    (2, ["--fusion-compare", "0,64,-1"]),
])
def test_ranks_train_the_one_rank_model(one_rank, np_, extra):
    p = run(np_, *MLP, *extra)
    v1 = reported(one_rank.stderr, "val_loss")[-1]
    vn = reported(p.stderr, "val_loss")[-1]
    assert rel(v1, vn) < 1e-5, (v1, vn)
    # metrics are global: the mean training loss over all ranks' examples,
    # the rank shard as the small batch, the global batch as the big one
    for a, b in zip(reported(one_rank.stderr, "train_loss"), reported(p.stderr, "train_loss")):
        assert rel(a, b) < 1e-5
    assert set(reported(p.stderr, "batch_small")) == {100 // np_}
    assert set(reported(p.stderr, "batch_big")) == {100}
    assert reported(p.stderr, "samples_per_s")
    assert f"{np_} ranks: weights identical on every rank" in p.stderr
    if "--fusion-kb" not in extra:
        # auto fusion timed its shortlisted layouts in the first steps (the
        # losses above match 1 rank although the layout changed every step)
        m = re.search(r"fusion auto: timed 4 steps of each layout, ms per step \(median of the "
                      r"last 3\): (.*); using (.+) \((\d+) buckets\)", p.stderr)
        assert m, p.stderr
        timed = dict(re.findall(r"(no fusion|one bucket|\d+ KiB)(?: \(model's pick\))? "
                                r"([\d.]+)", m[1]))
        assert "no fusion" in timed and len(timed) >= 2 and m[2] in timed, m[0]
        assert float(timed[m[2]]) == min(float(v) for v in timed.values()), m[0]
    if "--fusion-compare" in extra:
        # after auto's choice the steps cycled through it, no fusion, 64 KiB
        # and auto's choice again (the losses above still match 1 rank):
        # every cycle timed
        num = r"[\d.]+ [\d.]+ [\d.]+"
        m = re.search(r"fusion compare: (\d+) cycles of 4 steps .*?: (no fusion|one bucket|\d+ "
                      r"KiB) \(auto's choice\) %s; no fusion %s ratio %s; 64 KiB %s ratio "
                      r"%s; in use again %s ratio %s$" % ((num,) * 7), p.stderr, re.M)
        assert m, p.stderr
        tuned = re.search(r"fusion auto: timed 4 steps of each layout.*: (.*); using", p.stderr)
        ntuned = len(tuned[1].split(","))
        assert int(m[1]) == (200 - 4 * ntuned) // 4, (m[0], ntuned)


def test_batch_not_divisible_by_ranks():
    # 103 over 4 ranks: 26, 26, 26, 25; gradients weighted by share. No
    # report steps: one rank splits a report step's batch in halves for the
    # gradient-noise measurement, 52 + 51 here, which sums in another order
    # (with this seed the difference grows to 1e-3 in val_loss by step 200).
    # 1 rank without the split and 4 ranks differ in the order of dW's sums
    # alone: about 1e-7 in val_loss, which this run's trajectory may
    # amplify late (seen: 7e-7 at step 180, 1e-3 at 200, in one build of
    # the float softmax; 1e-7 in the next), so the evaluations up to step
    # 120 are compared: a share wrongly weighted is off from the first.
    args = [a if a != "100" else "103" for a in MLP]
    args[args.index("--log-every") + 1] = "1000"
    args[args.index("--max-steps") + 1] = "120"
    args[args.index("--eval-every") + 1] = "20"
    p1 = run(0, *args)
    p4 = run(4, *args)
    v1, v4 = reported(p1.stderr, "val_loss"), reported(p4.stderr, "val_loss")
    assert len(v1) == len(v4) >= 6, (v1, v4)
    assert max(rel(a, b) for a, b in zip(v1, v4)) < 1e-5, (v1, v4)


# Issue 38, item 0: several epochs with weight decay and momentum on, a
# short last batch at every epoch boundary (1000 = 10 x 96 + 40), every
# epoch's val_loss compared with 1 rank. 2 or 3 ranks sum the same
# gradient in another fp32 order (one GEMM per shard, then the all-reduce),
# so they agree to rounding (5e-8 here, measured over 5 seeds and the
# Prescott, Haswell and SkylakeX kernels), not bit for bit. The step is
# kept in the non-chaotic regime on purpose: at --lr 0.05 with momentum 0.9
# a ReLU unit that sits within rounding of 0 on one example flips on one
# side only and the runs part (the 2.6e-3 at step 100; 1 rank with
# --threads 2 against --threads 1 parts by 8.6e-3 the same way, and with
# --weight-decay 0 seeds 5-7 part by up to 1.5e-2; docs in trainer/README).
# What this does catch: weight decay skipped at an epoch's last step on the
# ranks (2.8e-4 off) or momentum reset at an epoch start (0.17 off).
EPOCHS_WD = ["--train-subset", "1000", "--val-size", "1000", "--hidden", "64",
             "--batch-size", "96", "--epochs", "6", "--eval-every", "0", "--log-every", "1000",
             "--lr", "0.01", "--momentum", "0.9", "--weight-decay", "0.005", "--seed", "2",
             "--threads", "1"]


@pytest.mark.parametrize("np_", [2, 3])
def test_ranks_follow_one_rank_across_epochs_with_weight_decay(np_):
    v1 = reported(run(0, *EPOCHS_WD).stderr, "val_loss")
    p = run(np_, *EPOCHS_WD)
    vn = reported(p.stderr, "val_loss")
    assert len(v1) == len(vn) == 6, (v1, vn)  # one evaluation per epoch
    for e, (a, b) in enumerate(zip(v1, vn)):
        assert rel(a, b) < 1e-6, (e + 1, a, b)
    assert f"{np_} ranks: weights identical on every rank" in p.stderr


def test_hierarchical_2x2_equals_flat():
    flat = run(4, *MLP, "--allreduce", "ring")
    hier = run(4, *MLP, "--allreduce", "hier", "--ranks-per-node", "2")
    assert rel(reported(flat.stderr, "val_loss")[-1], reported(hier.stderr, "val_loss")[-1]) < 1e-5
    assert "all-reduce hier" in hier.stderr


@pytest.mark.parametrize("extra", [["--wire", "bf16"], ["--wire", "fp16"],
                                   ["--topk", "0.01", "--allreduce", "ring"]])
def test_compressed_training_learns(one_rank, extra):
    p = run(2, *MLP, *extra)
    acc = reported(p.stderr, "val_acc")[-1]
    assert acc > 0.6, acc  # 10 classes: chance is 0.1
    assert "2 ranks: weights identical on every rank" in p.stderr


def test_cnn_batchnorm_is_per_rank():
    # Per-rank BN: each rank normalises over its own shard, so 2 ranks with
    # global batch 64 compute what 1 rank does with micro-batches of 32.
    cnn = ["--model", "cnn", "--channels", "4,8", "--train-subset", "1024", "--val-size", "256",
           "--epochs", "100", "--max-steps", "24", "--batch-size", "64", "--log-every", "4",
           "--eval-every", "24", "--threads", "1"]
    p1 = run(0, *cnn, "--micro-batch", "32")
    p2 = run(2, *cnn)
    a, b = reported(p1.stderr, "train_loss"), reported(p2.stderr, "train_loss")
    assert len(a) == len(b) == 6
    for x, y in zip(a, b):
        assert rel(x, y) < 1e-5, (a, b)
    # synchronised statistics would differ: full-batch BN on one rank
    full = reported(run(0, *cnn).stderr, "train_loss")
    assert max(rel(x, y) for x, y in zip(full, b)) > 1e-4
    assert "2 ranks: weights identical on every rank" in p2.stderr


def test_params_reach_every_rank(tmp_path):
    e = mpi_env()
    e["JIZHI_PARAMS"] = '{"batch_size": 60, "allreduce": "hier"}'
    p = subprocess.run([MPIRUN, "--oversubscribe", "-np", "2", TRAIN, *MLP, "--max-steps", "20",
                        "--log-every", "10"], capture_output=True, text=True, env=e, timeout=120)
    assert p.returncode == 0, p.stderr
    assert set(reported(p.stderr, "batch_size")) == {60}
    assert "all-reduce hier" in p.stderr
    e["JIZHI_PARAMS"] = '{"comm": "local"}'
    p = subprocess.run([MPIRUN, "--oversubscribe", "-np", "2", TRAIN, *MLP], capture_output=True,
                       text=True, env=e, timeout=120)
    assert p.returncode != 0
    assert "param comm" in p.stderr


def test_checkpoint_written_once_loaded_by_every_rank(tmp_path):
    ck = str(tmp_path / "a.jzck")
    run(2, *MLP, "--max-steps", "100", "--save", ck)
    assert os.path.exists(ck)
    full = run(2, *MLP)
    resumed = run(2, *MLP, "--resume", ck)
    assert rel(reported(full.stderr, "val_loss")[-1], reported(resumed.stderr, "val_loss")[-1]) < 1e-6
    assert "2 ranks: weights identical on every rank" in resumed.stderr


# Restoring under mpirun (#38 review12 item 1): rank 0 alone decides and
# reads the checkpoint (--resume or JIZHI_LOAD_CHECKPOINT from its own
# environment) and broadcasts its bytes; no other rank reads the file.
TINY = ["--train-subset", "1000", "--val-size", "200", "--hidden", "32", "--batch-size", "50",
        "--log-every", "3", "--eval-every", "6", "--threads", "1"]


def mpmd(env0, env1, *args, timeout=60, args1=()):
    """Two ranks, each with its own JIZHI_LOAD_CHECKPOINT (None: unset);
    args1: rank 1's extra arguments."""
    cmd = [MPIRUN, "--oversubscribe"]
    for i, v in enumerate((env0, env1)):
        cmd += (([":"] if i else []) + ["-np", "1"] +
                (["-x", "JIZHI_LOAD_CHECKPOINT=" + v] if v else []) +
                [TRAIN, *args, *(args1 if i else ())])
    e = mpi_env()
    e.pop("JIZHI_LOAD_CHECKPOINT", None)
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_ck(tmp_path_factory):
    ck = str(tmp_path_factory.mktemp("ck") / "tiny.jzck")
    run(0, *TINY, "--max-steps", "6", "--save", ck)
    both = mpmd(ck, ck, *TINY, "--max-steps", "12")
    assert both.returncode == 0, both.stderr
    return ck, both


def test_checkpoint_env_on_rank_0_only_restores_every_rank(tiny_ck):
    # before: rank 1 started at step 0 without the load while rank 0 was at
    # step 6; the collectives disagreed (MPI_ERR_TRUNCATE, exit 15)
    ck, both = tiny_ck
    assert "jizhi: step 9 train_loss" in both.stderr  # resumed at step 6
    assert "jizhi: step 3 train_loss" not in both.stderr
    p = mpmd(ck, None, *TINY, "--max-steps", "12")
    assert p.returncode == 0, p.stderr
    assert reported(p.stderr, "val_loss") == reported(both.stderr, "val_loss")
    assert "2 ranks: weights identical on every rank" in p.stderr
    assert "ignored" not in p.stderr


def test_checkpoint_env_on_another_rank_only_is_ignored_with_a_line(tiny_ck):
    # before: rank 1 read the file and failed with "changed after rank 0
    # read it"; now rank 0 decides (no restore) and rank 1 says it ignores
    # its variable; the run equals a fresh one
    ck, both = tiny_ck
    p = mpmd(None, ck, *TINY, "--max-steps", "12")
    assert p.returncode == 0, p.stderr
    assert ("rank 1: JIZHI_LOAD_CHECKPOINT=%s ignored: rank 0 restores no checkpoint" % ck
            in p.stderr)
    fresh = run(2, *TINY, "--max-steps", "12")
    assert reported(p.stderr, "val_loss") == reported(fresh.stderr, "val_loss")
    assert reported(p.stderr, "val_loss") != reported(both.stderr, "val_loss")
    assert "2 ranks: weights identical on every rank" in p.stderr


def test_resume_path_is_rank_0s_even_where_another_rank_cannot_open_it(tiny_ck):
    # --resume comes from rank 0 (the broadcast config) and its bytes too:
    # a path rank 1 cannot open (another node's disk) does not matter (the
    # config was rank 0's before too; this keeps rank 1's own flag unread)
    ck, both = tiny_ck
    p = mpmd(None, None, *TINY, "--max-steps", "12", "--resume", ck,
             args1=("--resume", "/nonexistent/other.jzck"))
    assert p.returncode == 0, p.stderr
    assert reported(p.stderr, "val_loss") == reported(both.stderr, "val_loss")
    assert "2 ranks: weights identical on every rank" in p.stderr
    # rank 1's own differing --resume is named (#38 review13 item 12;
    # before: ignored without a word)
    assert ("rank 1: --resume /nonexistent/other.jzck ignored: every rank restores the "
            "checkpoint rank 0 read (%s)" % ck) in p.stderr
    q = mpmd(None, None, *TINY, "--max-steps", "3", args1=("--resume", ck))
    assert q.returncode == 0, q.stderr
    assert ("rank 1: --resume %s ignored: rank 0 restores no checkpoint, so no rank does"
            % ck) in q.stderr


def test_checkpoint_from_a_fifo_is_read_once_for_every_rank(tiny_ck, tmp_path):
    # a FIFO can be read once: before, rank 1 opened it after rank 0 had
    # drained it and waited forever
    import threading
    ck, both = tiny_ck
    fifo = str(tmp_path / "ck.fifo")
    os.mkfifo(fifo)
    data = open(ck, "rb").read()

    def writer():
        with open(fifo, "wb") as f:  # blocks until rank 0 opens it
            f.write(data)
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    try:
        p = mpmd(fifo, fifo, *TINY, "--max-steps", "12", timeout=30)
    finally:
        if w.is_alive():  # never opened: unblock the writer
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    assert p.returncode == 0, p.stderr
    assert reported(p.stderr, "val_loss") == reported(both.stderr, "val_loss")


def test_checkpoint_broadcast_in_many_pieces_restores_every_rank(tiny_ck):
    # #38 review13 item 4: rank 0's JIZHI_CKPT_PIECE_BYTES (rank 1's own
    # is not read) splits the bytes into pieces of 997 (a KB checkpoint, so
    # several pieces and a short last one); the run equals the one-piece one
    ck, both = tiny_ck
    assert os.path.getsize(ck) > 3 * 997
    cmd = [MPIRUN, "--oversubscribe", "-np", "1", "-x", "JIZHI_CKPT_PIECE_BYTES=997",
           TRAIN, *TINY, "--max-steps", "12", "--resume", ck, "--verbose", ":", "-np", "1",
           "-x", "JIZHI_CKPT_PIECE_BYTES=5", TRAIN, *TINY, "--max-steps", "12"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    size = os.path.getsize(ck)  # review14 item 4: the piece size is seen
    assert "checkpoint: %d bytes in %d broadcasts" % (size, -(-size // 997)) in p.stderr
    assert reported(p.stderr, "val_loss") == reported(both.stderr, "val_loss")
    assert "2 ranks: weights identical on every rank" in p.stderr


def test_checkpoint_piece_size_out_of_range_is_refused(tiny_ck):
    # #38 review14 item 3: read only where rank 0 broadcasts a checkpoint;
    # a run that shares none (one process, even one restoring) ignores it
    ck, both = tiny_ck
    e = mpi_env()
    e["JIZHI_CKPT_PIECE_BYTES"] = "0"
    for extra in ([], ["--resume", ck]):
        p = subprocess.run([TRAIN, *TINY, "--max-steps", "12", *extra],
                           capture_output=True, text=True, env=e, timeout=60)
        assert p.returncode == 0, (extra, p.stderr)
        assert "JIZHI_CKPT_PIECE_BYTES" not in p.stderr
    cmd = [MPIRUN, "--oversubscribe", "-np", "2", "-x", "JIZHI_CKPT_PIECE_BYTES=0",
           TRAIN, *TINY, "--max-steps", "12", "--resume", ck]
    p = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=60)
    assert p.returncode == 2, p.stderr
    assert "JIZHI_CKPT_PIECE_BYTES: expected bytes from 1 to 268435456, got '0'" in p.stderr
    assert "train_loss" not in p.stderr


def test_a_rank_without_memory_for_the_checkpoint_ends_every_rank(tiny_ck):
    # the README's claim, by fault injection on rank 1 (a real shortage
    # under overcommit meets the OOM killer): rank 1 names itself, rank 0
    # says another rank lacked memory, both exit 1, no hang, no training
    ck, both = tiny_ck
    cmd = [MPIRUN, "--oversubscribe", "-np", "1", TRAIN, *TINY, "--max-steps", "12",
           "--resume", ck, ":", "-np", "1", "-x", "JIZHI_TEST_CKPT_NOMEM=1", TRAIN,
           *TINY, "--max-steps", "12"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=60)
    assert p.returncode == 1, p.stderr
    assert ("rank 1: --resume: no memory for the %d bytes of %s that rank 0 read "
            "(injected: JIZHI_TEST_CKPT_NOMEM=1)" % (os.path.getsize(ck), ck)) in p.stderr
    assert "rank 0: --resume: 1 other rank(s) had no memory for the checkpoint" in p.stderr
    assert "train_loss" not in p.stderr


def strip_rank_state(src, dst):
    """Writes src without its ranks' top-k state section (header length and
    CRC recomputed): a checkpoint as if the residuals were not saved."""
    import struct
    import zlib
    b = open(src, "rb").read()
    plen = struct.unpack_from("<Q", b, 16)[0]
    end = 24 + plen
    pos = b.rfind(b"DIST", 24, end)
    assert pos > 0
    ranks, count = struct.unpack_from("<IQ", b, pos + 4)
    assert pos + 16 + ranks * count * 4 == end, (pos, ranks, count, end)
    body = bytearray(b[:pos])
    struct.pack_into("<Q", body, 16, pos - 24)
    open(dst, "wb").write(bytes(body) + struct.pack("<I", zlib.crc32(body) & 0xffffffff))
    return ranks, count


def test_topk_checkpoint_restores_each_ranks_residuals(tmp_path):
    # top-k with momentum correction: each rank's residuals and velocities
    # go into rank 0's checkpoint and come back to their rank on load, so a
    # run resumed mid-way ends where the uninterrupted one does (same
    # val_loss, 1e-6 relative: the runs are deterministic, so in practice
    # bit-identical). Without them the resumed run diverges.
    topk = ["--topk", "0.02", "--momentum", "0.9", "--topk-warmup", "1", "--max-steps", "120"]
    ck = str(tmp_path / "a.jzck")
    run(2, *MLP, *topk, "--max-steps", "60", "--save", ck)
    full = run(2, *MLP, *topk)
    resumed = run(2, *MLP, *topk, "--resume", ck)
    v_full = reported(full.stderr, "val_loss")[-1]
    assert rel(v_full, reported(resumed.stderr, "val_loss")[-1]) < 1e-6
    assert "momentum correction" in full.stderr
    assert "2 ranks: weights identical on every rank" in resumed.stderr
    # the negative control: the same checkpoint without the ranks' state
    bare = str(tmp_path / "bare.jzck")
    ranks, count = strip_rank_state(ck, bare)
    assert ranks == 2 and count > 0
    cold = run(2, *MLP, *topk, "--resume", bare)
    assert "residuals start from zero" in cold.stderr
    assert rel(v_full, reported(cold.stderr, "val_loss")[-1]) > 1e-4


def test_live_set_reaches_every_rank_at_one_step(jz):
    jz.env.update({k: v for k, v in mpi_env().items() if k.startswith("OMPI_")})
    spec = {
        "name": "dist-live",
        "objective": {"metric": "val_acc", "mode": "max"},
        "scheduler": {"type": "random", "seed": 1},
        "budget": {"trials": 1, "parallel": 1},
        "space": {"momentum": {"type": "float", "low": 0.5, "high": 0.9}},
        "trial": {"command": [MPIRUN, "--oversubscribe", "-np", "2", TRAIN, "--dataset",
                              "synthetic", "--synthetic-n", "2000", "--val-size", "200",
                              "--hidden", "16", "--epochs", "100000", "--max-steps", "3000000",
                              "--batch-size", "32", "--lr", "0.05", "--log-every", "20",
                              "--threads", "1", "--quiet"],
                  "timeout_s": 180, "retries": 0},
    }
    path = jz.write_spec(spec)
    run_ = jz.popen("run", path, "--slots", "2")
    try:
        jz.wait_for(lambda: jz.sql("SELECT COUNT(*) FROM metrics WHERE name='lr'")[0][0] > 2,
                    timeout=90, what="the trial's first reports")
        (tid,) = jz.sql("SELECT MAX(id) FROM trials")[0]
        s = jz.run("trial", "set", str(tid), "lr=0.0125", "batch_size=40", timeout=60)
        assert s.returncode == 0, s.stdout + s.stderr
        jz.wait_for(lambda: jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='lr' "
                                   "ORDER BY step DESC LIMIT 1", tid)[0][0] == pytest.approx(0.0125),
                    timeout=60, what="lr=0.0125 in the reports")
        jz.wait_for(lambda: jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='batch_small' "
                                   "ORDER BY step DESC LIMIT 1", tid)[0][0] == 20,
                    timeout=60, what="the re-split batch (20 per rank)")
        for verb in ("pause", "resume"):
            r = jz.run("trial", verb, str(tid), timeout=60)
            assert r.returncode == 0, r.stdout + r.stderr
        st = jz.run("trial", "stop", str(tid), timeout=60)
        assert st.returncode == 0, st.stdout + st.stderr
        run_.wait(timeout=120)
        (state,) = jz.sql("SELECT state FROM trials WHERE id=?", tid)[0]
        assert state in ("completed", "stopped"), state
        logs = jz.run("trial", "logs", str(tid), "--stderr", timeout=60).stdout
        steps = {}
        for rank, what, step in re.findall(
                r"rank (\d+): instruction \d+ \((set lr|set batch_size|pause|resume|stop)\) applied "
                r"at step (\d+)",
                logs):
            steps.setdefault(what, {})[int(rank)] = int(step)
        for what in ("set lr", "set batch_size", "pause", "resume", "stop"):
            assert set(steps.get(what, {})) == {0, 1}, logs
            assert len(set(steps[what].values())) == 1, steps  # the same step on both ranks
        # acknowledged as applied (rank 0 acks once both ranks applied)
        sets = [a for a, d in jz.sql("SELECT applied, detail FROM events WHERE trial_id=? AND "
                                      "kind='instruction'", tid) if '"set"' in (d or "")]
        assert sets and all(a == 1 for a in sets), sets
    finally:
        if run_.poll() is None:
            run_.kill()
            run_.wait()


def test_one_rank_through_the_comm_layer_equals_the_plain_step(one_rank):
    # --comm mpi on one rank (MPI singleton) takes the fusion/bucket path
    p = run(0, *MLP, "--comm", "mpi", "--allreduce", "native")
    assert rel(reported(one_rank.stderr, "val_loss")[-1], reported(p.stderr, "val_loss")[-1]) < 1e-5
    assert "1 ranks (mpi)" in p.stderr


def test_nccl_needs_the_cuda_binary():
    p = subprocess.run([TRAIN, "--comm", "nccl"], capture_output=True, text=True, env=mpi_env(),
                       timeout=60)
    assert p.returncode == 2
    assert "built without NCCL" in p.stderr


# What a lent GPU machine has of its own (scripts/gpu-pack.sh leaves these
# out of the pack): glibc, the C++ runtime and CUDA's libraries.
MACHINE_LIBS = re.compile(r"^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libpthread|libdl|librt|"
                          r"libresolv|libnsl|libutil|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|"
                          r"libcublas|libcublasLt|libnccl)\.so")


def _why_no_pack():
    if not os.path.exists(os.path.join(BUILD, "bin", "jizhi-train-cuda")):
        return "no jizhi-train-cuda (no CUDA toolkit): nothing to pack"
    if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        return "Fashion-MNIST not installed: the pack carries it"
    return None


@pytest.fixture(scope="module")
def gpu_pack(tmp_path_factory):
    """scripts/gpu-pack.sh's pack, made once for the module (fast xz: its
    size is not the point here); None where it cannot be made. Tests read
    it and unpack copies of it (_unpacked), as gpu-check.sh --pack does."""
    if _why_no_pack():
        return None
    dest = tmp_path_factory.mktemp("gpupack") / "pack"
    e = dict(os.environ, BUILD=BUILD, PACK=str(dest), XZ_OPT="-0 -T0", TRAVEL_MAX_MB="400")
    p = subprocess.run([os.path.join(ROOT_DIR, "scripts", "gpu-pack.sh")], capture_output=True,
                       text=True, env=e, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return dest


def _unpacked(pack, dest):
    """A copy of the pack's launchers with its payload unpacked beside them."""
    if pack is None:
        pytest.skip(_why_no_pack())
    shutil.copytree(pack / "bin", dest / "bin")
    subprocess.run(["tar", "-C", str(dest), "-xJf", str(pack / "payload.tar.xz")], check=True)
    return dest


def test_gpu_pack_holds_every_library_the_binaries_load_but_the_machines_own(tmp_path, gpu_pack):
    # a lent GPU machine has CUDA and PyTorch but none of the build's
    # packages: every library the packed binaries load must come from the
    # pack or be one the machine has (glibc, libstdc++, CUDA's)
    pack = _unpacked(gpu_pack, tmp_path / "run")
    libs = pack / "lib"
    assert (libs / "libzmq.so.5").exists() and (libs / "libjansson.so.4").exists()
    assert not any(MACHINE_LIBS.match(f.name) for f in libs.iterdir()), sorted(libs.iterdir())
    for b in ("jizhi-train", "jizhi-train-cuda", "jizhi", "jizhi-core"):
        out = subprocess.run(["ldd", str(pack / "libexec" / b)], capture_output=True, text=True,
                             env=dict(os.environ, LD_LIBRARY_PATH=str(libs))).stdout
        for line in out.splitlines():
            name = line.split()[0]
            where = line.split("=>")[1].split()[0] if "=>" in line else ""
            assert where.startswith(str(libs)) or MACHINE_LIBS.match(name) \
                or name.startswith("/lib64/ld-linux"), (b, line)
        # the launcher runs the packed binary with the pack's libraries
        p = subprocess.run([str(pack / "bin" / b), "--help"], capture_output=True, text=True,
                           timeout=30)
        assert "error while loading shared libraries" not in p.stderr, p.stderr
    for f in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        assert (gpu_pack / "data" / f).stat().st_size > 0
    manifest = (gpu_pack / "MANIFEST").read_text()
    assert manifest.startswith("commit ") and "libzmq.so.5" in manifest
    # over the size the device call can carry: refused with the sizes
    p = subprocess.run([os.path.join(ROOT_DIR, "scripts", "gpu-pack.sh")], capture_output=True,
                       text=True, timeout=300,
                       env=dict(os.environ, BUILD=BUILD, PACK=str(tmp_path / "big"),
                                XZ_OPT="-0 -T0", TRAVEL_MAX_MB="1"))
    assert p.returncode == 1 and "over TRAVEL_MAX_MB (1)" in p.stderr, p.stderr
    assert not (tmp_path / "big").exists()


def _libs_of(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    return [w.split()[0] if w.split()[0].startswith("/") else w.split("=>")[1].split()[0]
            for w in out.splitlines() if "/" in w]


def test_gpu_pack_runs_in_a_root_with_only_the_machines_libraries(tmp_path, gpu_pack):
    # the strongest stand-in for the lent machine here: a chroot holding
    # glibc, libstdc++, libgcc_s, a shell and the pack, nothing of the
    # build's packages; the launchers must start jizhi-train and jizhi there,
    # and jizhi-train-cuda too once CUDA's own libraries are where the
    # wheels' would be (named in the pack's cuda-libs, as gpu-check.sh
    # writes it; hard links to the toolkit's, no copies of 600 MB)
    if os.geteuid() != 0 or not shutil.which("chroot"):
        pytest.skip("needs root and chroot")
    pack = _unpacked(gpu_pack, tmp_path / "run")
    root = tmp_path / "root"
    for d in ("bin", "lib", "lib64"):  # a merged /usr, whatever this machine's is
        (root / "usr" / d).mkdir(parents=True)
        (root / d).symlink_to("usr/" + d)
    tools = [shutil.which(t) for t in ("sh", "dirname", "readlink", "basename")]
    for f in set(sum((_libs_of(t) for t in tools), [])) | set(tools) | {
            "/lib/x86_64-linux-gnu/" + n for n in (
                "libstdc++.so.6", "libgcc_s.so.1", "libm.so.6", "libpthread.so.0", "libdl.so.2",
                "librt.so.1", "libresolv.so.2")
            if os.path.exists("/lib/x86_64-linux-gnu/" + n)}:
        dest = root / os.path.realpath(f).lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
        if os.path.realpath(f) != f:  # the name the loader or the launcher asks for
            link = root / f.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                shutil.copy(f, link)
    if not (root / "bin" / "sh").exists():
        shutil.copy(shutil.which("sh"), root / "bin" / "sh")
    shutil.copytree(pack, root / "pack", symlinks=True)
    (root / "tmp").mkdir(exist_ok=True)
    chroot = lambda cmd: subprocess.run(["chroot", str(root), "/bin/sh", "-c", cmd],
                                        capture_output=True, text=True, timeout=60)
    if chroot("true").returncode != 0:
        pytest.skip("chroot refused here")
    for b in ("jizhi-train", "jizhi", "jizhi-core"):
        p = chroot("/pack/bin/%s --help" % b)
        assert p.returncode == 0 and "usage: " in p.stdout + p.stderr, (b, p.stderr)
    p = chroot("/pack/bin/jizhi-train-cuda --help")
    assert "error while loading shared libraries" in p.stderr  # CUDA's are the machine's
    (root / "wheels").mkdir()
    try:
        for name in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2"):
            os.link(os.path.realpath(os.path.join("/usr/local/cuda/lib64", name)),
                    root / "wheels" / name)
    except OSError as e:  # no toolkit, or it is on another file system
        print("jizhi-train-cuda with CUDA's libraries: not run (%s)" % e)
        return
    (root / "pack" / "cuda-libs").write_text("/wheels\n")
    p = chroot("/pack/bin/jizhi-train-cuda --help")
    assert p.returncode == 0 and "usage: " in p.stdout + p.stderr, p.stderr
    print("jizhi-train-cuda with CUDA's libraries: started")


def test_gpu_check_script_parses_and_its_cpu_side_runs(tmp_path, gpu_pack):
    # scripts/gpu-check.sh verifies the NCCL path on a GPU machine; here it
    # must parse, and with --cpu (the CPU binary standing in for
    # jizhi-train-cuda, --comm mpi for nccl) every comparison it makes
    # passes: 1 rank through the layer = local, top-k DGC within 0.02 of
    # dense with fewer bytes, checkpoint + resume exact, 2 ranks = 1 rank,
    # and the GPU-resident gradient section's comparisons (device vs host
    # path, overlap on vs off) with the CPU path standing in for both.
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "scripts", "gpu-check.sh")
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    e = mpi_env()
    e["BUILD"] = BUILD
    # through scripts/gpu-pack.sh's pack, as on a lent GPU machine without
    # the build's packages (the binaries' launchers, the libraries unpacked)
    # (where the CUDA binary was built: elsewhere the build's own binaries)
    pack = gpu_pack
    packed = pack is not None
    p = subprocess.run([script, "--cpu"] + (["--pack", str(pack)] if packed else []),
                       capture_output=True, text=True, env=e, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "preflight: ok" in p.stdout, p.stdout
    if packed:
        assert "--pack: %s" % pack in p.stdout, p.stdout
        assert sorted(os.listdir(pack)) == ["MANIFEST", "bin", "data", "payload.tar.xz"]
    for line in ("CPU vs CUDA: val_loss after 20 steps, val_acc after 200",
                 "1 rank mpi native vs local", "top-k 1% DGC vs dense local",
                 "checkpoint at step 100 and resume", "2 ranks mpi ring vs 1 rank",
                 "2 ranks mpi top-k 1% DGC", "speed on the GPU: SKIPPED (--cpu)",
                 "1 rank device path native vs local backend",
                 "1 rank device path ring vs local backend",
                 "1 rank device path native, overlap on vs off",
                 "2 ranks device path vs host path, 50 steps",
                 "2 ranks device path ring, overlap on vs off",
                 "2 ranks device path ring, fusion auto vs host path 64 KiB",
                 "device data vs host data", "graphs on vs off", "epilogue lt vs kernel",
                 "CNN fp32 2-step smoke run: ok", "CNN bf16 2-step smoke run: ok",
                 "CNN fp32 CPU vs CUDA, 20 steps", "CNN fp32 device data vs host data",
                 "CNN bf16 vs fp32 CUDA, 20 steps",
                 "CNN fp16 vs fp32 CUDA: SKIPPED (--cpu",
                 "CNN fp32 2 ranks --comm device path: SKIPPED (--cpu"):
        assert line in p.stdout, p.stdout
    # the gradient-noise inputs' check (issue 38 item 6): both data paths
    # compared, and agreeing (--cpu: the CPU stands in for the CUDA step)
    for data in ("host", "device"):
        line = [l for l in p.stdout.splitlines() if l.startswith("noise inputs, %s data:" % data)]
        assert line and line[0].endswith("ok (tol 1e-4 rel)"), p.stdout
        assert "batch_small 64 vs 64" in line[0], line
    # issue 38 item 6 (the batch-size scheduler bench on the GPU): said
    # skipped with its reason, in stdout and the JSON
    assert "batch-size scheduler on the GPU: SKIPPED (--cpu: no GPU" in p.stdout, p.stdout
    res = json.load(open(os.path.join(BUILD, "gpu-check.json")))
    assert res["batchsize_gpu"]["state"] == "skipped", res["batchsize_gpu"]
    assert res["runs_past_deadline"] == 0 and res["preflight"].startswith("ok ("), res
    assert "--cpu" in res["batchsize_gpu"]["reason"]
    assert "--trainer jizhi-train-cuda" in res["batchsize_gpu"]["command"]
    assert res["exit_status"] == 0 and res["mode"].startswith("cpu")
    assert res["checks"] and all(c["ok"] for c in res["checks"]), res["checks"]
    assert "FAIL" not in p.stdout, p.stdout
    bad = subprocess.run([script, "--bogus"], capture_output=True, text=True, env=e)
    assert bad.returncode == 2 and "usage" in bad.stderr
    bad = subprocess.run([script, "--cpu", "--pack", str(tmp_path / "none")], capture_output=True,
                         text=True, env=e)
    assert bad.returncode == 2 and "no payload.tar.xz or bin/ there" in bad.stderr, bad.stderr
    # PREBUILT (binaries carried to a GPU machine without the build's
    # packages): no build, and a binary that is not there is named
    e2 = dict(e, PREBUILT="1", BUILD=os.path.join(BUILD, "no-such-build"))
    # (--cpu: without it the script stops earlier, at "no NVIDIA GPU", here)
    miss = subprocess.run([script, "--cpu"], capture_output=True, text=True, env=e2, timeout=60)
    assert miss.returncode == 2, miss.stdout + miss.stderr
    out = miss.stdout + miss.stderr
    assert "PREBUILT:" in out and "jizhi-train is missing" in out, out


def test_gpu_check_refuses_without_a_gpu_and_writes_its_json(tmp_path):
    # no GPU here: without --cpu the script stops at once, before building,
    # with the reason (exit 2); with --cpu over stand-in binaries that print
    # fixed metrics (PREBUILT) it writes build/gpu-check.json from what it
    # printed: every verdict line, the exit status, the elapsed time and the
    # parts of issue 38's GPU items this tree has no code for
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "scripts", "gpu-check.sh")
    e = dict(os.environ, PATH="/usr/bin:/bin", BUILD=str(tmp_path))
    p = subprocess.run([script], capture_output=True, text=True, env=e, timeout=30)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "no NVIDIA GPU on this machine" in p.stderr and "--cpu" in p.stderr
    assert not (tmp_path / "gpu-check.json").exists()
    (tmp_path / "bin").mkdir()
    for name in ("jizhi-train", "jizhi-train-cuda"):
        f = tmp_path / "bin" / name
        f.write_text("#!/bin/sh\necho 'jizhi: step 20 val_loss=1.5'\n"
                     "echo 'jizhi: step 20 val_acc=0.5'\n")
        f.chmod(0o755)
    e["PREBUILT"] = "1"
    p = subprocess.run([script, "--cpu"], capture_output=True, text=True, env=e, timeout=120)
    res = json.load(open(tmp_path / "gpu-check.json"))
    assert res["exit_status"] == p.returncode == 1  # no fusion line, no bytes: FAIL
    assert res["mode"].startswith("cpu") and res["elapsed_s"] >= 0
    verdicts = [c["check"] for c in res["checks"]]
    assert any(v.startswith("fp32") and "ok" in v for v in verdicts), verdicts
    assert any(not c["ok"] for c in res["checks"])
    assert set(res["not_in_this_tree"]) == {"item 3", "item 4", "item 5", "item 6"}
    assert "not in this script" not in res["not_in_this_tree"]["item 6"]
    assert res["batchsize_gpu"]["state"] == "skipped"
    assert "batch-size scheduler on the GPU: SKIPPED (--cpu" in p.stdout
    # past DEADLINE no run is made: each says so, its row fails, and the
    # JSON counts them (a hung device run costs its limit, not the lease)
    p = subprocess.run([script, "--cpu"], capture_output=True, text=True, timeout=120,
                       env=dict(e, DEADLINE="0"))
    res = json.load(open(tmp_path / "gpu-check.json"))
    assert p.returncode == res["exit_status"] == 1, p.stdout + p.stderr
    assert "past the deadline (0 s): not run" in p.stdout, p.stdout
    assert res["runs_past_deadline"] >= 10 and not any(c["ok"] for c in res["checks"]), res
    # BS_ONLY: the build (here none: PREBUILT), then item 6 alone
    p = subprocess.run([script, "--cpu"], capture_output=True, text=True, timeout=60,
                       env=dict(e, BS_ONLY="1"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "batch-size scheduler on the GPU: SKIPPED (--cpu" in p.stdout
    assert "CPU vs CUDA" not in p.stdout, p.stdout
    res = json.load(open(tmp_path / "gpu-check.json"))
    assert res["checks"] == [] and res["batchsize_gpu"]["state"] == "skipped"


def fake_gpu_machine(tmp_path, trainer, **env):
    """A machine that lists a GPU (an nvidia-smi stand-in), jizhi's three
    programs as the shell script `trainer` (PREBUILT in tmp_path/bin), and
    PyTorch's bench failing at once as it does without CUDA (the other
    python the script runs is the real one). Returns gpu-check.sh's env."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in (UUID: GPU-0)'\n")
    (fake / "python").write_text(
        "#!/bin/sh\ncase \"$1\" in bench/bench_train_torch.py) exit 1;; esac\n"
        "exec %s \"$@\"\n" % shlex.quote(sys.executable))
    (tmp_path / "bin").mkdir()
    for name in ("jizhi-train", "jizhi-train-cuda", "jizhi"):
        (tmp_path / "bin" / name).write_text(trainer)
    for f in list(fake.iterdir()) + list((tmp_path / "bin").iterdir()):
        f.chmod(0o755)
    return dict(os.environ, PATH="%s:/usr/bin:/bin" % fake, BUILD=str(tmp_path), PREBUILT="1",
                PYTHON=str(fake / "python"), **env)


def test_gpu_check_where_every_run_fails_goes_to_the_end_and_records_it(tmp_path):
    # a machine that lists a GPU (nvidia-smi stand-in) where every trainer
    # run fails at once and PyTorch has no CUDA: no failure may end the
    # script early (set -e ended it at the first failed speed row); every
    # section reports, the speed rows say "-" (null in the JSON, not 0),
    # the CNN's smoke runs fail and its rows are skipped, the exit status is 1
    script = os.path.join(ROOT_DIR, "scripts", "gpu-check.sh")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    # compute-sanitizer's stand-in: records its arguments, reports one error
    san, san_calls = tmp_path / "compute-sanitizer", tmp_path / "san-calls"
    san.write_text("#!/bin/sh\necho \"$*\" >> %s\n"
                   "echo '========= Invalid __global__ write of size 4 bytes'\nexit 1\n" % san_calls)
    san.chmod(0o755)
    e = fake_gpu_machine(tmp_path, "#!/bin/sh\ncase \"$*\" in *--help*) exit 0;; esac\n"
                         "echo 'jizhi-train: stand-in failure' >&2\nexit 1\n",
                         BS_BUDGET="0", OUT=str(out_dir), SANITIZER=str(san))
    # an earlier run's files, which must not pass for this one's
    (tmp_path / "gpu-check-scaling-cnn.json").write_text('{"stale": 1}')
    (tmp_path / "gpu-check.md").write_text("stale table\n")
    p = subprocess.run([script], capture_output=True, text=True, env=e, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    # the first failed CUDA run of each model (part 1's MLP in fp32, the
    # CNN's fp32 smoke run) again under memcheck, for 2 steps; their
    # reports in $OUT; no other (bf16's failures have the same cause)
    calls = san_calls.read_text().splitlines()
    assert len(calls) == 2, calls
    for c, name in zip(calls, ("mlp-fp32", "cnn-fp32")):
        assert c.startswith("--tool memcheck ") and "jizhi-train-cuda" in c, c
        assert "--backend cuda" in c and "--precision fp32" in c, c
        assert ("--model cnn" in c) == name.startswith("cnn"), c
        assert c.endswith("--max-steps 2 --eval-every 2"), c
        assert "Invalid __global__ write" in (out_dir / ("sanitizer-%s.log" % name)).read_text()
        assert ("memcheck rerun, 2 steps: status 1, 1 report lines in sanitizer-%s.log" % name
                in out), out
    for line in ("CNN fp32 2-step smoke run: FAIL", "CNN rows: SKIPPED (the fp32 smoke run failed",
                 "CNN speed: SKIPPED (the fp32 smoke run failed)",
                 "== speed on the GPU: MLP 784-256-256-10", "batch-size scheduler on the GPU: SKIPPED"):
        assert line in out, (line, out)
    res = json.load(open(tmp_path / "gpu-check.json"))
    assert res["exit_status"] == 1 and res["mode"] == "gpu" and res["runs_past_deadline"] == 0
    assert [(r["batch"], r["precision"]) for r in res["speed_mlp"]] == [
        (b, pr) for b in (128, 1024, 8192, 65536) for pr in ("fp32", "bf16")]
    assert all(r["jizhi_cuda"] is None and r["pytorch"] is None and r["ratio"] is None
               for r in res["speed_mlp"]), res["speed_mlp"]
    rows = [c["check"] for c in res["checks"] if not c["ok"]]
    assert len(rows) == len(res["checks"]), res["checks"]  # no run passed: no row ok
    assert any(r.startswith("fp32 ") for r in rows) and any("smoke run" in r for r in rows), rows
    assert any(r.startswith("1 rank nccl native vs local") for r in rows), rows
    # the device tool's folder: the JSON and the whole log
    assert json.load(open(out_dir / "gpu-check.json")) == res
    assert "== speed on the GPU" in (out_dir / "gpu-check.log").read_text()
    # and its table (scripts/gpu-table.py): no number where no run measured one
    table = (out_dir / "gpu-check.md").read_text()
    assert table == (tmp_path / "gpu-check.md").read_text()
    assert "- checks: 0 ok, %d FAIL" % len(res["checks"]) in table, table
    assert "| 128 | fp32 | - | - | - | - | not measured |" in table, table
    assert "| 65536 | bf16 | - | - | - | - | not measured |" in table, table
    assert "stand-in (UUID: GPU-0)" in table and "CPU stand-in run" not in table, table
    # item 5's model: not made, with the reason, for both models
    assert res["scaling_model"] == {m: {"skipped": "no bf16 speed row measured"}
                                    for m in ("mlp", "cnn")}, res["scaling_model"]
    assert "mlp: not made (no bf16 speed row measured)." in table, table
    assert not (tmp_path / "gpu-check-scaling-cnn.json").exists()
    # runs that end by their time limit (status 124) are not rerun under
    # memcheck (they would hang again)
    san_calls.unlink()
    (tmp_path / "bin" / "jizhi-train-cuda").write_text(
        "#!/bin/sh\ncase \"$*\" in *--help*) exit 0;; esac\nexit 124\n")
    p = subprocess.run([script], capture_output=True, text=True, env=e, timeout=600)
    assert "no memcheck rerun: the run ended by its time limit" in p.stdout, p.stdout
    assert not san_calls.exists()
    # a program that cannot start (its --help fails: a library missing
    # there, a C library too old, ...): the preflight ends the script at
    # once, exit 2, the reason in the JSON
    (tmp_path / "bin" / "jizhi-train-cuda").write_text(
        "#!/bin/sh\necho 'stand-in: cannot run here' >&2\nexit 3\n")
    p = subprocess.run([script], capture_output=True, text=True, env=e, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    res = json.load(open(tmp_path / "gpu-check.json"))
    assert res["preflight"].startswith("FAIL: jizhi-train-cuda does not start (status 3)"), res
    assert "cannot run here" in res["preflight"] and res["checks"] == []


def test_gpu_table_writes_the_readme_between_its_markers_only(tmp_path):
    # scripts/gpu-table.py: gpu-check's JSON -> trainer/README.md's table.
    # The input is made here (a shape, not a measurement): a met, a missed
    # and an unmeasured row, a failed check, item 6 from a second run
    table = [sys.executable, os.path.join(ROOT_DIR, "scripts", "gpu-table.py")]
    mlp = [{"batch": 128, "precision": "fp32", "jizhi_cuda": 250000,
            "jizhi_cuda_host_data": 200000, "pytorch": 100000, "ratio": 2.5},
           {"batch": 8192, "precision": "bf16", "jizhi_cuda": 400000,
            "jizhi_cuda_host_data": None, "pytorch": 4000000, "ratio": 0.1},
           {"batch": 65536, "precision": "fp32", "jizhi_cuda": None,
            "jizhi_cuda_host_data": None, "pytorch": 5000000, "ratio": None}]
    # 0.996x, stored rounded as 1.0: judged on the speeds, missed; a fp32 CNN
    # row (against PyTorch fp32, not AMP) and one outside 256-8192: no goal
    mlp.append({"batch": 1024, "precision": "bf16", "jizhi_cuda": 99600,
                "jizhi_cuda_host_data": None, "pytorch": 100000, "ratio": 1.0})
    cnn = [{"batch": 128, "precision": "bf16", "jizhi_cuda": 9000, "pytorch_cl": 10000,
            "ratio": 0.9},
           {"batch": 2048, "precision": "fp32", "jizhi_cuda": 9000, "pytorch_cl": 1000,
            "ratio": 9.0},
           {"batch": 2048, "precision": "fp16", "jizhi_cuda": 8960, "pytorch_cl": 10000,
            "ratio": 0.9}]
    run = {"mode": "gpu", "date": "D", "gpus": ["GPU 0: X"], "exit_status": 1,
           "elapsed_s": 400, "within_10_min": True, "runs_past_deadline": 0,
           "preflight": "ok", "checks": [{"check": "a ok", "ok": True},
                                         {"check": "b FAIL", "ok": False}],
           "speed_mlp": mlp, "speed_cnn": cnn,
           "batchsize_gpu": {"state": "timeout", "reason": "DEADLINE"}}
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(run))
    second.write_text(json.dumps(dict(run, checks=[], speed_mlp=[], speed_cnn=[],
                                      batchsize_gpu={"state": "run", "median_ratio": 0.75,
                                                     "verdict": "met"},
                                      lars_gpu={"state": "run", "epochs": 60,
                                                "test_acc_8192": 0.9, "test_acc_256": 0.915,
                                                "points_below": 1.5, "verdict": "missed"})))
    head, tail = "# T\n\ntext  \n<!-- gpu-check:begin -->\n", "<!-- gpu-check:end -->\nend\n"
    readme = tmp_path / "README.md"
    readme.write_text(head + "old\n" + tail)
    p = subprocess.run(table + [str(first), "--second", str(second), "--readme", str(readme)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    text = readme.read_text()
    assert text.startswith(head) and text.endswith(tail) and "old" not in text, text
    for row in ("| 128 | fp32 | 250 000 | 200 000 | 100 000 | 2.50x | met |",
                "| 8192 | bf16 | 400 000 | - | 4 000 000 | 0.10x | **missed** |",
                "| 65536 | fp32 | - | - | 5 000 000 | - | not measured |",
                "| 1024 | bf16 | 99 600 | - | 100 000 | 1.00x | **missed** |",
                "| 128 | bf16 | 9 000 | 10 000 | 0.90x | (no goal) |",
                "| 2048 | fp32 | 9 000 | 1 000 | 9.00x | (no goal) |",
                "| 2048 | fp16 | 8 960 | 10 000 | 0.90x | **missed** |",
                "- checks: 1 ok, 1 FAIL", "- `b FAIL`",
                "Goal met in 1 of the 4 rows it is about (1 not measured).",
                "Goal met in 0 of the 1 rows it is about (0 not measured).",
                "(from `second.json`): median time to the target 0.75x the best fixed batch: met",
                "bf16) (from `second.json`): test_acc 0.9000 against batch 256's 0.9150 after 60 "
                "epochs, 1.50 points below: **missed**."):
        assert row in text, (row, text)
    # once more: the section is replaced, not appended to
    assert subprocess.run(table + [str(first), "--readme", str(readme)]).returncode == 0
    again = readme.read_text()
    assert again.count("| 128 | fp32 |") == 1 and "not run (timeout: DEADLINE)" in again, again
    # the shapes gpu-check writes: call 1 skipped item 6 (no bin/jizhi) and
    # was not asked for LARS; a LARS_ONLY call 2 ran LARS, was not asked for
    # item 6: call 1's reason stays, LARS comes from call 2
    c1, c2 = tmp_path / "c1.json", tmp_path / "c2.json"
    c1.write_text(json.dumps(dict(run, batchsize_gpu={"state": "skipped", "reason": "no jizhi"},
                                  lars_gpu={"state": "not asked", "reason": "LARS_ONLY"})))
    c2.write_text(json.dumps(dict(run, batchsize_gpu={"state": "not asked", "reason": "x"},
                                  lars_gpu={"state": "run", "epochs": 60, "test_acc_8192": 0.91,
                                            "test_acc_256": 0.915, "points_below": 0.5,
                                            "verdict": "met"})))
    p = subprocess.run(table + [str(c1), "--second", str(c2)], capture_output=True, text=True)
    assert "<= 0.8x by default): not run (skipped: no jizhi)." in p.stdout, p.stdout
    assert "bf16) (from `c2.json`): test_acc 0.9100 against" in p.stdout, p.stdout
    # a second call that did not run the bench leaves a first call's result
    ran = tmp_path / "ran.json"
    ran.write_text(json.dumps(dict(run, batchsize_gpu={"state": "run", "median_ratio": 0.9,
                                                        "verdict": "missed"})))
    p = subprocess.run(table + [str(ran), "--second", str(first)], capture_output=True, text=True)
    assert "median time to the target 0.90x the best fixed batch: **missed**" in p.stdout
    assert "(from `first.json`)" not in p.stdout, p.stdout
    # refused, exit 2, the file unchanged: a CPU stand-in's run, a README
    # without its markers, a file that is not gpu-check's, mixed modes
    stand_in = tmp_path / "cpu.json"
    stand_in.write_text(json.dumps(dict(run, mode="cpu stand-in (no GPU checked)")))
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    for args, target, said in (
            ([str(stand_in), "--readme", str(readme)], readme, "a CPU stand-in run"),
            ([str(first), "--readme", str(plain)], plain, "needs one line '<!-- gpu-check:begin"),
            ([str(junk), "--readme", str(readme)], readme, "not a gpu-check.sh result"),
            ([str(tmp_path / "none.json")], readme, "cannot read"),
            ([str(first), "--second", str(stand_in), "--readme", str(readme)], readme,
             "differs from")):
        before = target.read_bytes()
        p = subprocess.run(table + args, capture_output=True, text=True)
        assert p.returncode == 2 and said in p.stderr, (args, p.stderr)
        assert target.read_bytes() == before
    # without --readme a stand-in's table prints, saying what it is
    p = subprocess.run(table + [str(stand_in)], capture_output=True, text=True)
    assert p.returncode == 0 and "CPU stand-in run (`--cpu`)" in p.stdout, p.stdout


def test_scaling_model_is_the_ring_formula_fed_with_the_measured_steps(tmp_path):
    # bench/scaling_model.py (issue 38 item 5): t_c from samples/s at a
    # batch, S from the gradient bytes; the ring's 2(P-1) alpha + 2(P-1)/P S
    # beta, the hierarchical plan (a ring in a node of G, one over the N
    # leaders), efficiency with and without overlap; numbers worked by hand
    model = [sys.executable, os.path.join(ROOT_DIR, "bench", "scaling_model.py")]
    out = tmp_path / "s.json"
    p = subprocess.run(model + ["--measured", "1000:1000000", "--grad-bytes", "4000000",
                                "--alpha-us", "10", "--intra-gbs", "100", "--inter-gbps", "80",
                                "--gpus-per-node", "4", "--json", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "batch 1000 a GPU: step 1.000 ms" in p.stdout, p.stdout
    res = json.load(open(out))
    (b,) = res["batches"]
    assert b["batch"] == 1000 and abs(b["step_s"] - 1e-3) < 1e-15
    row = {(r["gpus"], r["scheme"]): r for r in b["rows"]}
    # inside a node of 4 at 100 GB/s: 6 alpha + 1.5 S/B = 60 + 60 us
    assert abs(row[(8, "flat ring")]["comm_s"] - (14 * 10e-6 + 2 * 7 / 8 * 4e6 / 10e9)) < 1e-12
    hier16 = 120e-6 + (6 * 10e-6 + 1.5 * 4e6 / 10e9)  # node ring + the 4 leaders' ring at 10 GB/s
    assert abs(row[(16, "hierarchical")]["comm_s"] - hier16) < 1e-12
    flat16 = 30 * 10e-6 + 2 * 15 / 16 * 4e6 / 10e9
    assert abs(row[(16, "flat ring")]["comm_s"] - flat16) < 1e-12
    assert abs(row[(16, "hierarchical")]["eff"] - 1e-3 / (1e-3 + hier16)) < 1e-12
    t_b = 2e-3 / 3  # the assumed share: the all-reduce (0.78 ms) outlasts the backward
    assert abs(row[(16, "hierarchical")]["eff_overlap"] - 1e-3 / (1e-3 - t_b + hier16)) < 1e-12
    # 2 nodes: the node ring, then 2 leaders: 2 alpha + S/B between nodes
    assert abs(row[(8, "hierarchical")]["comm_s"] - (120e-6 + 20e-6 + 4e6 / 10e9)) < 1e-12
    # bf16 on the wire halves S; the fit's assumptions are printed
    p2 = subprocess.run(model + ["--measured", "1000:1000000", "--grad-bytes", "4000000",
                                 "--wire-bytes", "2"], capture_output=True, text=True)
    assert "2.000 MB a step on the wire; assumed: alpha 5 us" in p2.stdout, p2.stdout
    # a batch past the training set is an epoch a step: t_c = 55 000 / samples/s
    p3 = subprocess.run(model + ["--measured", "65536:1100000", "--grad-bytes", "4",
                                 "--json", str(out)], capture_output=True, text=True)
    assert p3.returncode == 0 and "an epoch of 55000 a step" in p3.stdout, p3.stdout + p3.stderr
    assert abs(json.load(open(out))["batches"][0]["step_s"] - 0.05) < 1e-15
    # from gpu-check's JSON: its measured rows of that model and precision
    run = {"mode": "gpu", "checks": [], "speed_mlp": [], "speed_cnn": [
        {"batch": 256, "precision": "bf16", "jizhi_cuda": 51200, "pytorch_cl": None, "ratio": None},
        {"batch": 2048, "precision": "bf16", "jizhi_cuda": None, "pytorch_cl": 1, "ratio": None},
        {"batch": 256, "precision": "fp32", "jizhi_cuda": 9, "pytorch_cl": 1, "ratio": 9.0}]}
    gc = tmp_path / "gc.json"
    gc.write_text(json.dumps(run))
    p = subprocess.run(model + ["--gpu-check", str(gc), "--model", "cnn", "--grad-bytes",
                                "113640", "--json", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert [(b["batch"], b["step_s"]) for b in json.load(open(out))["batches"]] == [(256, 0.005)]
    # errors: exit 2, a message naming what is wrong
    gc_cpu = tmp_path / "cpu.json"
    gc_cpu.write_text(json.dumps(dict(run, mode="cpu stand-in (no GPU checked)")))
    for args, said in ((["--measured", "128:x"], "'128:x' is not BATCH:SAMPLES_PER_S"),
                       (["--measured", "128:0"], "must be > 0"),
                       (["--measured", "128:5", "--backward-share", "2"], "--backward-share"),
                       (["--measured", "128:5", "--gpus-per-node", "6"], "whole nodes only"),
                       (["--gpu-check", str(gc_cpu)], "a CPU stand-in measured no GPU step"),
                       (["--gpu-check", str(gc), "--model", "mlp"], "no measured mlp bf16 row"),
                       (["--gpu-check", str(gc), "--model", "cnn", "--precision", "fp16"],
                        "no measured cnn fp16 row")):
        p = subprocess.run(model + args + ["--grad-bytes", "1000"], capture_output=True, text=True)
        assert p.returncode == 2 and said in p.stderr, (args, p.stderr)


def test_gpu_check_feeds_the_scaling_model_its_measured_bf16_steps(tmp_path):
    # a machine that lists a GPU (nvidia-smi stand-in) whose trainer
    # stand-in reports batch x 1000 samples/s (a step is 1 ms at every
    # batch) and, with --verbose, the model line: item 5's section runs the
    # model on the bf16 rows of the MLP and the CNN with their gradient
    # bytes, and the JSON, its table and $OUT carry the projections
    script = os.path.join(ROOT_DIR, "scripts", "gpu-check.sh")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    e = fake_gpu_machine(
        tmp_path, "#!/bin/sh\ncase \"$*\" in *--help*) exit 0;; esac\n"
        "case \"$*\" in *--verbose*cnn*|*cnn*--verbose*) echo 'jizhi-train: model: cnn:x, "
        "2 parameters (113640 bytes of fp32 gradients)' >&2; exit 0;; "
        "*--verbose*) echo 'jizhi-train: model: mlp:x, 1 parameters (1077288 bytes of fp32 "
        "gradients)' >&2; exit 0;; esac\n"
        "b=$(echo \"$*\" | sed -n 's/.*--batch-size \\([0-9]*\\).*/\\1/p')\n"
        "[ -n \"$b\" ] || b=128\n"
        "for i in 1 2 3; do echo \"jizhi: step $i samples_per_s=$((b * 1000))\" >&2; done\n",
        BS_BUDGET="0", OUT=str(out_dir))
    p = subprocess.run([script], capture_output=True, text=True, env=e, timeout=600)
    out = p.stdout + p.stderr
    assert "== issue 38 item 5: the alpha-beta scaling model" in out, out
    res = json.load(open(tmp_path / "gpu-check.json"))
    sc = res["scaling_model"]
    assert sorted(sc) == ["cnn", "mlp"], out
    assert [b["batch"] for b in sc["mlp"]["batches"]] == [128, 1024, 8192, 65536]
    assert [b["batch"] for b in sc["cnn"]["batches"]] == [256, 2048, 8192]
    # a step is 1 ms at every batch but 65 536, which takes the 55 000 examples
    for b in (b for m in sc for b in sc[m]["batches"]):
        assert abs(b["step_s"] - min(b["batch"], 55000) / (b["batch"] * 1000)) < 1e-15, b
    assert sc["mlp"]["bytes_per_allreduce"] == 1077288 / 2, sc["mlp"]
    assert sc["cnn"]["bytes_per_allreduce"] == 113640 / 2 and sc["cnn"]["label"] == "cnn"
    assert "scaling model, mlp:\nscaling model (alpha-beta, weak scaling) for mlp:" in out, out
    assert json.load(open(out_dir / "gpu-check-scaling-cnn.json")) == sc["cnn"]
    table = (out_dir / "gpu-check.md").read_text()
    assert "| 128 | 1.000 |" in table and "| 256 | 1.000 |" in table, table


def test_gpu_check_lars_only_runs_both_arms_and_records_the_verdict(tmp_path):
    # LARS_ONLY (item 4's accuracy goal, the second call where item 6 ran
    # in the first): the CNN at batch 8192 (LARS) then 256 (SGD) on the
    # stand-in GPU with the CPU measurement's flags, each arm's test_acc
    # and seconds, the verdict (within 1 point) in stdout and the JSON; an
    # arm that fails or times out is said so, the other still runs and its
    # test_acc is kept, and the section is an ERROR (exit 1)
    script = os.path.join(ROOT_DIR, "scripts", "gpu-check.sh")
    calls = tmp_path / "calls"
    trainer = ("#!/bin/sh\ncase \"$*\" in *--help*) exit 0;; esac\necho \"$*\" >> %s\n"
               "case \"$*\" in *--optimizer\\ lars*) a=0.9071; r=${LARS_RC:-0};; *) a=0.9150; r=0;; esac\n"
               "[ \"$r\" = 0 ] && echo \"jizhi: step 9 test_acc=$a\" >&2\nexit $r\n" % calls)
    e = fake_gpu_machine(tmp_path, trainer, LARS_ONLY="1", LARS_EPOCHS="3")
    p = subprocess.run([script], capture_output=True, text=True, env=e, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("lars 8192 vs 256 (cnn bf16, 3 epochs, seed 1): test_acc 0.9071 vs 0.9150: "
            "0.79 points below: goal met (within 1 point)") in p.stdout, p.stdout
    runs = [l for l in calls.read_text().splitlines() if "--epochs 3" in l]
    common = ("--backend cuda --model cnn --channels 16,32 --precision bf16 --epochs 3 --seed 1 "
              "--bn-recompute 8 --eval-every 1000000 --log-every 1000000 ")
    assert runs == [common + "--batch-size 8192 --optimizer lars --lr 4 --trust 0.0025 "
                    "--warmup-epochs 3 --schedule poly --poly-power 1 --zero-gamma 0",
                    common + "--batch-size 256 --lr 0.1 --schedule cosine"], runs
    res = json.load(open(tmp_path / "gpu-check.json"))
    arms = res["lars_gpu"].pop("arms")
    assert res["lars_gpu"] == {"state": "run", "epochs": 3, "test_acc_8192": 0.9071,
                               "test_acc_256": 0.915, "points_below": 0.79,
                               "verdict": "met"}, res["lars_gpu"]
    assert [arms[b]["test_acc"] for b in ("8192", "256")] == [0.9071, 0.915], arms
    assert res["checks"] == [] and res["batchsize_gpu"]["state"] == "not asked"
    # the 8192 arm fails (then hits its time limit): the 256 arm's result kept
    for rc, said in (("3", "ERROR (status 3, no test_acc)"), ("124", "TIMEOUT (over its 100 s)")):
        p = subprocess.run([script], capture_output=True, text=True, env=dict(e, LARS_RC=rc),
                           timeout=120)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "lars arm 8192: %s after " % said in p.stdout, p.stdout
        assert "lars arm 256: test_acc 0.9150 in " in p.stdout, p.stdout
        lars = json.load(open(tmp_path / "gpu-check.json"))["lars_gpu"]
        assert lars["state"] == "error" and "the batch 8192 arm" in lars["reason"], lars
        assert lars["arms"]["256"]["test_acc"] == 0.915 and "test_acc" not in lars["arms"]["8192"]
        table = (tmp_path / "gpu-check.md").read_text()
        assert "batch 256: test_acc 0.9150 in " in table, table
    # a LARS_ONLY call that ends before its section (the preflight: a
    # program that cannot start): LARS asked and not reached, item 6 not asked
    (tmp_path / "bin" / "jizhi-train-cuda").write_text("#!/bin/sh\nexit 3\n")
    p = subprocess.run([script], capture_output=True, text=True, env=e, timeout=60)
    res = json.load(open(tmp_path / "gpu-check.json"))
    assert p.returncode == 2 and res["preflight"].startswith("FAIL"), p.stdout + p.stderr
    assert res["lars_gpu"]["state"] == "not reached", res["lars_gpu"]
    assert res["batchsize_gpu"]["state"] == "not asked", res["batchsize_gpu"]


def test_gpu_check_item6_runs_the_bench_with_the_cuda_trainers_flags(tmp_path):
    # a machine that lists a GPU (nvidia-smi stand-in) with BS_ONLY: the
    # section runs bench/schedulers_batchsize.py under its time limit with
    # jizhi-train-cuda. The stand-in trainer prints its arguments and no
    # report, so the bench's step-time curve finds nothing: the section must
    # say ERROR with the bench's status, exit 1, record it in the JSON, and
    # every curve run must have got the flags the section passed
    # (--backend cuda, batches 256..8192)
    if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        pytest.skip("Fashion-MNIST not installed: the bench skips before its curve")
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "scripts", "gpu-check.sh")
    calls = tmp_path / "calls"
    e = fake_gpu_machine(tmp_path, '#!/bin/sh\necho "$0 $*" >> %s\n' % calls,
                         BS_ONLY="1", BS_BUDGET="200")
    p = subprocess.run([script], capture_output=True, text=True, env=e, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "batch-size scheduler on the GPU: ERROR (the bench exited with status 1)" in out
    assert "trained at no batch size" in out, out
    res = json.load(open(tmp_path / "gpu-check.json"))
    bs = res["batchsize_gpu"]
    assert bs["state"] == "error" and bs["budget_s"] == 200, bs
    runs = [l for l in calls.read_text().splitlines()
            if "jizhi-train-cuda" in l and not l.endswith("--help")]  # not the preflight's
    assert len(runs) == 12, runs  # 256..8192, each twice
    for l in runs:
        assert "--backend cuda" in l and "--model mlp --hidden 256,256" in l, l
    assert sorted({int(l.split("--batch-size ")[1].split()[0]) for l in runs}) == [
        256, 512, 1024, 2048, 4096, 8192]


# The same in bf16 on oneDNN's bf16 matmuls (--matmul auto where the CPU has
# bf16 instructions; review7 item 6: the data-parallel tests above reach
# oneDNN only in fp32): 2 epochs, weight decay and momentum on, the
# non-chaotic lr above; each rank's shard runs its own matmul and the fp32
# weight gradients are summed across ranks, so 1e-5 as the fp32 tests.
def test_ranks_follow_one_rank_in_bf16_on_onednn():
    args = [*EPOCHS_WD, "--precision", "bf16", "--verbose"]
    args[args.index("--epochs") + 1] = "2"
    p1 = run(0, *args)
    lin = re.search(r"jizhi-train: linears: (.*)", p1.stderr)
    assert lin, p1.stderr
    if "bf16 kernels" not in lin[1]:
        pytest.skip("the bf16 MLP is not on oneDNN here: " + lin[1])
    p = run(2, *args)
    v1, vn = reported(p1.stderr, "val_loss"), reported(p.stderr, "val_loss")
    assert len(v1) == len(vn) == 2, (v1, vn)
    for e, (a, b) in enumerate(zip(v1, vn)):
        assert rel(a, b) < 1e-5, (e + 1, a, b)
    assert "2 ranks: weights identical on every rank" in p.stderr
