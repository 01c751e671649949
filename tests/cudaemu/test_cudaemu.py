"""jizhi-train-cuda's own code run on cudaemu, the CPU emulation of the CUDA
APIs (tests/cudaemu/README.md), against the CPU trainer: the comparisons of
scripts/gpu-check.sh, with its tolerances, on a small model and few steps.
These are not GPU results; they check the CUDA code's logic and numerics
where no GPU is: the buffers and their sizes, the cuBLAS, cuBLASLt, cuDNN
and NCCL calls' arguments, the kernels' indexing and reductions, the
streams' waits and the graphs' captures.

Run by tests/run-all.sh (its own section, beside the sanitizer passes)
with `make cudaemu` built; skipped with the reason where it is not."""
import os
import re
import shutil
import signal
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("JIZHI_BUILD", os.path.join(ROOT, "build"))
EMU = os.path.join(BUILD, "cudaemu", "jizhi-train-cudaemu")
# the same under AddressSanitizer (make cudaemu-asan): each device buffer a
# malloc'd block, so a kernel that indexes past one is reported
EMU_ASAN = os.path.join(BUILD, "cudaemu-asan", "jizhi-train-cudaemu")
SELF = os.path.join(BUILD, "cudaemu", "cudaemu-selftest")
TWIN_BN = os.path.join(BUILD, "cudaemu", "cudaemu-twin-bn")
CPU = os.path.join(BUILD, "bin", "jizhi-train")
MPIRUN = shutil.which("mpirun")
DATA = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

pytestmark = pytest.mark.skipif(not os.path.exists(EMU),
                                reason="cudaemu not built (make cudaemu)")
needs_data = pytest.mark.skipif(not os.path.exists(DATA), reason="no Fashion-MNIST at " + DATA)

MLP = ["--dataset", "fashion-mnist", "--train-subset", "2048", "--val-size", "1000",
       "--hidden", "64,64", "--batch-size", "128", "--lr", "0.05", "--max-steps", "20",
       "--eval-every", "20", "--epochs", "100", "--seed", "3", "--threads", "1"]
CNN = ["--dataset", "fashion-mnist", "--train-subset", "1024", "--val-size", "500",
       "--model", "cnn", "--channels", "8,16", "--batch-size", "64", "--lr", "0.05",
       "--max-steps", "6", "--eval-every", "6", "--epochs", "100", "--seed", "3",
       "--threads", "1"]


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OMP_WAIT_POLICY="passive",
             CUDAEMU_STATS="1")
    return e


def run(prog, args, ranks=0, status=0, **more_env):
    """prog's stderr and stdout; status: the exit status it must have (None: any
    but 0)"""
    cmd = [prog] + args
    if ranks:
        cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks)] + cmd
    e = env()
    e.update(more_env)
    # its own process group: a run past its time is killed with its ranks
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=e, start_new_session=True)
    try:
        out, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail("%s: still running after 300 s\n%s" % (" ".join(cmd), (out + err)[-3000:]))
    if status is None:
        assert p.returncode != 0, " ".join(cmd) + "\n" + (out + err)[-3000:]
    else:
        assert p.returncode == status, " ".join(cmd) + "\n" + (out + err)[-3000:]
    return err + out


def metric(out, name):
    v = re.findall(r"^jizhi: step \d+ %s=(\S+)$" % name, out, re.M)
    assert v, "no %s in:\n%s" % (name, out[-2000:])
    return float(v[-1])


def stats(out):
    m = re.search(r"cudaemu: (\d+) kernel launches, (\d+) graphs captured, "
                  r"(\d+) graph launches", out)
    assert m, out[-2000:]
    return [int(x) for x in m.groups()]


def close(a, b, rel):
    assert abs(a - b) <= rel * max(abs(a), abs(b)), "%r vs %r (tol %g rel)" % (a, b, rel)


# ---- the emulation itself -------------------------------------------------------

@pytest.mark.parametrize("case,status,says", [
    ("good", 0, "ok"),
    ("bad-launch", 0, "ok: cudaErrorInvalidConfiguration"),
    ("malloc-in-capture", 0, "ok: cudaErrorStreamCaptureUnsupported, then "
                             "cudaErrorStreamCaptureInvalidated"),
    ("missing-wait", 0, "stale: d[0] = 1"),
    ("host-pointer", 3, "cudaemu: kernel k_scale: argument 0"),
    ("copy-past-end", 3, "cudaemu: cudaMemcpy destination: 1200 bytes at offset 0 run past "
                         "the end of a 1024-byte allocation"),
    ("divergent-barrier", 3, "cudaemu: kernel k_divergent: a thread of block 0 ended while "
                             "others wait at __syncthreads"),
    ("unjoined-fork", 0, "ok: cudaErrorStreamCaptureUnjoined"),
    ("outside-wait", 0, "ok: cudaErrorStreamCaptureIsolation, then "
                        "cudaErrorStreamCaptureInvalidated; cudaErrorNotReady"),
    ("partial-warp-shuffle", 3, "cudaemu: kernel k_warp_sum: __shfl_down_sync with a full "
                                "mask in a partial warp (block of 48 threads)"),
    ("pinned-past-end", 3, "cudaemu: cudaMemcpyAsync source (pinned): 400 bytes at offset 0 "
                           "run past the end of a 256-byte allocation"),
    ("other-device", 3, "cudaemu: kernel k_scale: argument 0 is memory of device 1, the "
                        "launch is on device 0"),
])
def test_the_emulation_passes_a_correct_program_and_stops_each_misuse(case, status, says):
    p = subprocess.run([SELF, case], capture_output=True, text=True, timeout=60)
    assert p.returncode == status, p.stdout + p.stderr
    assert says in p.stdout + p.stderr, p.stdout + p.stderr


# ---- the MLP (backend_cuda.cu) --------------------------------------------------

@needs_data
@pytest.mark.parametrize("prec,rel", [("fp32", 1e-6), ("bf16", 0.01), ("fp16", 0.01)])
def test_cuda_mlp_matches_the_cpu_trainer(prec, rel):
    # gpu-check's "CPU vs CUDA" row: val_loss after 20 steps; the default
    # run is device data, a CUDA graph and the cuBLASLt epilogue
    c = run(CPU, MLP + ["--precision", prec])
    g = run(EMU, MLP + ["--precision", prec, "--backend", "cuda", "--quiet", "0"])
    close(metric(g, "val_loss"), metric(c, "val_loss"), rel)
    assert "training set in device memory" in g and "captured as a CUDA graph" in g, g
    launches, captured, replays = stats(g)
    assert captured == 1 and replays >= 15, (captured, replays)


@needs_data
@pytest.mark.parametrize("prec", ["fp32", "bf16"])
def test_device_data_and_graphs_change_no_bit(prec):
    # gpu-check's "device data vs host data" and "graphs on vs off": the
    # same kernels on the same values, so the same printed bits
    runs = {}
    for data, graphs in (("host", "off"), ("device", "off"), ("device", "on")):
        o = run(EMU, MLP + ["--precision", prec, "--backend", "cuda", "--cuda-epilogue",
                            "kernel", "--gpu-data", data, "--cuda-graphs", graphs])
        runs[data, graphs] = (metric(o, "val_loss"), metric(o, "val_acc"))
        assert (stats(o)[1] == 1) == (graphs == "on"), o[-500:]
    assert runs["host", "off"] == runs["device", "off"] == runs["device", "on"], runs


@needs_data
def lt_calls(out):
    m = re.search(r"^cudaemu: cublasLtMatmul: (\d+) calls$", out, re.M)
    return int(m[1]) if m else 0


def test_lt_epilogue_against_the_kernel_path():
    # the lt run must have gone through cublasLtMatmul (the backend falls
    # back to the kernel path quietly where cuBLASLt offers no algorithm)
    a = run(EMU, MLP + ["--backend", "cuda", "--cuda-epilogue", "lt"])
    b = run(EMU, MLP + ["--backend", "cuda", "--cuda-epilogue", "kernel"])
    assert lt_calls(a) > 0 and lt_calls(b) == 0, (lt_calls(a), lt_calls(b))
    close(metric(a, "val_loss"), metric(b, "val_loss"), 1e-6)


@needs_data
@pytest.mark.parametrize("opt", ["lars", "sgd --nesterov --weight-decay 0.001"])
def test_cuda_optimisers_match_the_cpu_trainer(opt):
    args = MLP + ["--optimizer"] + opt.split()
    close(metric(run(EMU, args + ["--backend", "cuda"]), "val_loss"),
          metric(run(CPU, args), "val_loss"), 1e-5)


@needs_data
def test_gradient_noise_inputs_match_the_cpu_step():
    # the CUDA step's first-half measure (cuda_mlp_half.cuh) on a measuring
    # step, eager between graph replays, against the CPU's (trainer/gns.h)
    gn = MLP + ["--max-steps", "10", "--eval-every", "10", "--log-every", "10"]
    c = run(CPU, gn)
    g = run(EMU, gn + ["--backend", "cuda", "--cuda-graphs", "on"])
    for m in ("grad_sqnorm_small", "grad_sqnorm_big"):
        close(metric(g, m), metric(c, m), 1e-4)
    assert metric(g, "batch_small") == metric(c, "batch_small") == 64


# ---- the CNN (backend_cudnn.cu on the emulated cuDNN) ---------------------------

@needs_data
def test_cuda_cnn_matches_the_cpu_cnn_and_its_half_precisions_follow():
    c = run(CPU, CNN)
    g = run(EMU, CNN + ["--backend", "cuda"])
    close(metric(g, "val_loss"), metric(c, "val_loss"), 1e-4)  # gpu-check's CNN_RT
    for prec in ("bf16", "fp16"):
        h = run(EMU, CNN + ["--backend", "cuda", "--precision", prec])
        close(metric(h, "val_loss"), metric(g, "val_loss"), 0.01)


# ---- order: what the kernels compute does not depend on which thread runs first

@needs_data
@pytest.mark.parametrize("args", [MLP + ["--precision", "bf16"], CNN],
                         ids=["mlp-bf16", "cnn-fp32"])
def test_the_same_bits_when_blocks_and_threads_run_last_to_first(args):
    # CUDAEMU_ORDER=reverse: a kernel whose result depends on the order of
    # its blocks or threads (a race, or a sum that is not fixed-order) would
    # train another model; the weights' path claims the same bits every run
    fwd = run(EMU, args + ["--backend", "cuda"])
    rev = run(EMU, args + ["--backend", "cuda"], CUDAEMU_ORDER="reverse")
    assert metric(rev, "val_loss") == metric(fwd, "val_loss")
    assert metric(rev, "val_acc") == metric(fwd, "val_acc")


# ---- two ranks: NCCL over MPI, the device gradient path (dist_dev.cu) ------------

@needs_data
@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (openmpi-bin)")
def test_two_ranks_device_path_matches_host_path_and_the_cpu():
    c = metric(run(CPU, MLP + ["--comm", "mpi"], ranks=2), "val_loss")
    for algo, wire in (("ring", "fp32"), ("native", "fp32"), ("hier", "bf16")):
        flags = MLP + ["--backend", "cuda", "--comm", "nccl", "--allreduce", algo,
                       "--wire", wire, "--fusion-kb", "64", "--quiet", "0"]
        d = run(EMU, flags + ["--grad-path", "device"], ranks=2)
        h = run(EMU, flags + ["--grad-path", "host"], ranks=2)
        assert "gradients summed in GPU memory" in d, d[-2000:]
        close(metric(d, "val_loss"), metric(h, "val_loss"), 1e-5)
        if wire == "fp32":
            close(metric(d, "val_loss"), c, 1e-5)


@needs_data
@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (openmpi-bin)")
def test_two_ranks_cnn_device_path_matches_the_cpu_cnn_on_two_ranks():
    c = run(CPU, CNN + ["--comm", "mpi"], ranks=2)
    d = run(EMU, CNN + ["--backend", "cuda", "--comm", "nccl", "--grad-path", "device",
                        "--quiet", "0"], ranks=2)
    assert "gradients summed in GPU memory" in d, d[-2000:]
    close(metric(d, "val_loss"), metric(c, "val_loss"), 1e-4)


@needs_data
@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (openmpi-bin)")
def test_two_ranks_device_path_gives_the_same_bits_when_streams_run_early():
    # CUDAEMU_SCHED=eager: the communication stream runs as soon as its
    # waits allow (the default runs it as late as they allow), so a stream
    # that overwrites what the other still reads, without a wait, shows
    flags = MLP + ["--backend", "cuda", "--comm", "nccl", "--grad-path", "device",
                   "--allreduce", "ring", "--fusion-kb", "64"]
    late = run(EMU, flags, ranks=2)
    early = run(EMU, flags, ranks=2, CUDAEMU_SCHED="eager")
    assert metric(early, "val_loss") == metric(late, "val_loss")


@needs_data
@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (openmpi-bin)")
def test_nccl_comm_layer_keeps_its_device_on_the_overlap_thread():
    # two emulated GPUs, rank 1 on device 1; the CPU trainer's overlap
    # thread sums buckets larger than any staging buffer before it, so it
    # allocates one there: before the fix it landed on device 0 (that
    # thread's current device) and NCCL was handed another device's memory
    base = ["--dataset", "fashion-mnist", "--train-subset", "512", "--val-size", "200",
            "--hidden", "1500,1500", "--batch-size", "64", "--max-steps", "2",
            "--eval-every", "2", "--seed", "3", "--threads", "1"]
    out = run(EMU, base + ["--comm", "nccl", "--overlap", "1", "--fusion-kb", "65536",
                           "--allreduce", "native"], ranks=2, CUDAEMU_DEVICES="2")
    cpu = run(CPU, base + ["--comm", "mpi"], ranks=2)
    close(metric(out, "val_loss"), metric(cpu, "val_loss"), 1e-5)




def test_bf16_batchnorm_kernels_give_their_cpu_twins_bits():
    # cuda_bn_kernels.cuh against bn_half.c: the same chunks, lanes and
    # order of adds (a thread's 8 loads at a time included), so the same
    # bits where nothing contracts a multiply-add
    p = subprocess.run([TWIN_BN], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("the same bits") == 5, p.stdout

def no_device_on(rank, tmp_path):
    """a launcher for mpirun: the emulation has no device on that rank"""
    w = tmp_path / "no-device-on-rank"
    w.write_text('#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = %d ] && export CUDAEMU_DEVICES=0\n'
                 'exec "$@"\n' % rank)
    w.chmod(0o755)
    return str(w)


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (openmpi-bin)")
@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_without_a_device_stops_every_nccl_rank_with_its_reason(rank, tmp_path):
    # before the fix the failed rank sat in MPI_Finalize and the others in
    # the broadcast of rank 0's ncclUniqueId: no line, no end
    out = run(no_device_on(rank, tmp_path), [EMU, "--dataset", "synthetic", "--comm", "nccl",
                                            "--hidden", "16", "--max-steps", "3"],
              ranks=2, status=None)
    assert "jizhi-train: --comm nccl: rank %d: no CUDA device" % rank in out, out[-3000:]


@pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (openmpi-bin)")
def test_a_rank_whose_cuda_backend_fails_ends_the_run(tmp_path):
    # rank 1 alone fails to make its backend while rank 0 goes on to its
    # first collective: rank 1 must leave without MPI_Finalize (it waited
    # there for rank 0, which waited for it)
    out = run(no_device_on(1, tmp_path), [EMU, "--dataset", "synthetic", "--comm", "mpi",
                                         "--backend", "cuda", "--hidden", "16",
                                         "--max-steps", "3"], ranks=2, status=None)
    assert "jizhi-train: --backend cuda: no CUDA device" in out, out[-3000:]

SHORT = ["--max-steps", "6", "--eval-every", "6"]
ASAN_CASES = [
    ("mlp-bf16-graph-lt", MLP + SHORT + ["--precision", "bf16"], 0),
    ("mlp-fp16-host-kernel", MLP + SHORT + ["--precision", "fp16", "--gpu-data", "host",
                                            "--cuda-epilogue", "kernel", "--log-every", "3"], 0),
    ("mlp-lars-tail", MLP + SHORT + ["--optimizer", "lars", "--batch-size", "96",
                                     "--train-subset", "500"], 0),
    ("cnn-fp32", CNN + ["--max-steps", "3", "--eval-every", "3"], 0),
    ("cnn-bf16-tail", CNN + ["--precision", "bf16", "--batch-size", "40", "--train-subset",
                             "100", "--max-steps", "3", "--eval-every", "3"], 0),
    ("mlp-2ranks-ring-bf16-wire", MLP + SHORT + ["--comm", "nccl", "--allreduce", "ring",
                                                 "--wire", "bf16", "--fusion-kb", "16"], 2),
    ("cnn-2ranks", CNN + ["--comm", "nccl", "--max-steps", "3", "--eval-every", "3"], 2),
]


@needs_data
@pytest.mark.skipif(not os.path.exists(EMU_ASAN),
                    reason="cudaemu under AddressSanitizer not built (make cudaemu-asan)")
@pytest.mark.parametrize("name,args,ranks", ASAN_CASES, ids=[c[0] for c in ASAN_CASES])
def test_no_access_past_a_buffer_under_address_sanitizer(name, args, ranks):
    # kernels and library calls index device buffers themselves: an index
    # past a buffer lands in AddressSanitizer's red zone around its block
    # (its dlopen does not search the program's run path: LD_LIBRARY_PATH)
    if ranks and MPIRUN is None:
        pytest.skip("mpirun not installed (openmpi-bin)")
    flags = args + ["--backend", "cuda"]
    out = run(EMU_ASAN, flags, ranks=ranks, ASAN_OPTIONS="detect_leaks=0",
              LD_LIBRARY_PATH=os.path.join(BUILD, "cudaemu-asan", "lib"))
    assert "AddressSanitizer" not in out, out[-3000:]
    assert metric(out, "val_loss") == metric(run(EMU, flags, ranks=ranks), "val_loss")
