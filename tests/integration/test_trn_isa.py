"""jizhi-train's kernel choice on CPUs without bf16 instructions, emulated
by capping oneDNN's ISA with ONEDNN_MAX_CPU_ISA (read by oneDNN 2.6.3 at its
first call, so it must be in the process's environment): --matmul/--conv
auto keep bf16 on the OpenBLAS emulation there (before, the bf16 MLP failed
at step 0 under AVX2 and fell to oneDNN's gemm:jit, 3.0x slower, under
AVX512_CORE), --matmul/--conv dnnl refuse bf16 at startup, fp32 stays on
oneDNN; a change to bf16 mid-run (a precision schedule, a live `set
precision` through the daemons) runs bf16 as the emulation and --verbose
says where at the switch; a resume takes the CNN's convolution path its
checkpoint's run began on (bit-identical to the uninterrupted run), and
bf16 from a trial's param on a resume is refused under dnnl as at a start.
Skipped without oneDNN in the build."""
import json
import math
import os
import re
import subprocess

import pytest

from conftest import BUILD, base_spec

TRAIN = os.path.join(BUILD, "bin", "jizhi-train")
SMALL = ["--dataset", "synthetic", "--synthetic-n", "512", "--batch-size", "64",
         "--max-steps", "6", "--eval-every", "6", "--log-every", "6", "--threads", "1",
         "--verbose"]
CNN = ["--model", "cnn", "--channels", "4", "--blocks", "1"]


def train(isa, *args, env=None):
    env = dict(os.environ, OMP_WAIT_POLICY="passive", **(env or {}))
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    return subprocess.run([TRAIN, *SMALL, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def line(p, what):
    m = re.search(r"jizhi-train: %s: (.*)" % what, p.stderr)
    assert m, p.stderr
    return m.group(1)


def done(p):
    assert p.returncode == 0, p.stderr
    m = re.search(r"done: .*", p.stderr)
    assert m, p.stderr
    return re.sub(r", [0-9.]+s$", "", m.group(0))


@pytest.fixture(scope="module", autouse=True)
def needs_onednn():
    p = train(None, "--precision", "fp32")
    if "oneDNN" not in line(p, "linears"):
        pytest.skip("this build has no oneDNN: " + line(p, "linears"))


@pytest.mark.parametrize("isa", ["AVX2", "AVX512_CORE"])
def test_bf16_mlp_auto_falls_back_to_the_openblas_emulation(isa):
    p = train(isa, "--precision", "bf16")
    assert p.returncode == 0, p.stderr
    lin = line(p, "linears")
    assert lin.startswith("OpenBLAS sgemm, precision emulated by rounding"), lin
    assert "no bf16 instructions for oneDNN on this CPU (ISA %s)" % isa.lower() in lin, lin
    # the same numbers as --matmul blas (OpenBLAS is not capped by oneDNN's variable)
    assert done(p) == done(train(None, "--precision", "bf16", "--matmul", "blas"))


@pytest.mark.parametrize("isa", ["AVX2", "AVX512_CORE"])
def test_fp32_mlp_stays_on_onednn(isa):
    p = train(isa, "--precision", "fp32")
    assert p.returncode == 0, p.stderr
    assert "fp32 kernels" in line(p, "linears")


@pytest.mark.parametrize("args", [["--matmul", "dnnl", "--precision", "bf16"],
                                  ["--matmul", "dnnl", "--precision-schedule", "fp32:1,bf16:1"],
                                  CNN + ["--conv", "dnnl", "--precision", "bf16"]])
def test_dnnl_in_bf16_refused_at_startup_without_bf16_instructions(args):
    p = train("AVX2", *args)
    assert p.returncode in (1, 2), p.stderr
    flag = "--conv" if "--conv" in args else "--matmul"
    assert "%s dnnl: this CPU has no bf16 instructions for oneDNN (its ISA: avx2)" % flag \
        in p.stderr, p.stderr
    assert "step" not in p.stderr and "done" not in p.stderr, p.stderr


def test_bf16_cnn_auto_uses_the_gemm_path_without_bf16_instructions():
    p = train("AVX512_CORE", *CNN, "--precision", "bf16")
    conv = line(p, "convolutions")
    assert conv.startswith("im2col + OpenBLAS GEMM"), conv
    assert "no bf16 instructions for oneDNN on this CPU (ISA avx512_core)" in conv, conv
    assert done(p) == done(train(None, *CNN, "--precision", "bf16", "--conv", "gemm"))
    p = train("AVX2", *CNN, "--precision", "fp32")  # fp32 keeps oneDNN's AVX2 kernels
    assert "fp32 kernels" in line(p, "convolutions")


def test_bf16_on_onednn_where_the_cpu_has_it():
    p = train(None, "--precision", "bf16")
    lin = line(p, "linears")
    if "no bf16 instructions" in lin:
        pytest.skip("this CPU has no bf16 instructions for oneDNN: " + lin)
    assert "bf16 kernels" in lin and done(p)
    assert "bf16 kernels" in line(train(None, *CNN, "--precision", "bf16"), "convolutions")


@pytest.mark.parametrize("model", [CNN + ["--conv", "dnnl"], ["--matmul", "dnnl"]],
                         ids=["cnn-dnnl", "mlp-dnnl"])
def test_bf16_checkpoint_resumed_in_fp32_without_bf16_instructions(tmp_path, model):
    # --conv dnnl / --matmul dnnl on a resume whose checkpoint restores bf16
    # (saved on the default path): not refused, as the command line's fp32
    # loses to the checkpoint's bf16 (before the route came from the
    # restored config, the CNN's oneDNN convolutions ran bf16 with no
    # kernels under AVX2 and failed); bf16 runs as the emulation (the CNN on
    # oneDNN's fp32 kernels, the MLP on OpenBLAS), as a live change to bf16
    # does
    ck = str(tmp_path / "ck")
    saved = train("AVX2", *model[:-2], "--precision", "bf16", "--save", ck)
    assert saved.returncode == 0, saved.stderr
    r = train("AVX2", *model, "--precision", "fp32", "--resume", ck, "--max-steps", "12",
              "--eval-every", "12", "--log-every", "12")
    done(r)
    if "--conv" in model:  # --verbose describes the kernels after the restore
        assert "fp32 kernels (bf16 emulated by rounding: no bf16 instructions for oneDNN " \
            "on this CPU (ISA avx2))" in line(r, "convolutions")
    else:
        assert line(r, "linears").startswith(
            "OpenBLAS sgemm, precision emulated by rounding (no bf16 instructions")


@pytest.mark.parametrize("model", [CNN + ["--conv", "dnnl"], ["--matmul", "dnnl"]],
                         ids=["cnn-dnnl", "mlp-dnnl"])
def test_bf16_from_a_trial_param_on_resume_is_refused_under_dnnl(tmp_path, model):
    # the bf16 exemption of --conv/--matmul dnnl is for bf16 the checkpoint
    # itself brought: a fp32 checkpoint resumed with the trial's param
    # precision=bf16 (a PBT restart, JIZHI_PARAMS standalone) is refused as
    # the same param is at a fresh start (before: every resume was exempt)
    ck = str(tmp_path / "ck")
    saved = train("AVX2", *model, "--precision", "fp32", "--save", ck)
    assert saved.returncode == 0, saved.stderr
    r = train("AVX2", *model, "--resume", ck, "--max-steps", "12",
              env={"JIZHI_PARAMS": json.dumps({"precision": "bf16"})})
    assert r.returncode in (1, 2), r.stderr
    flag = "--conv" if "--conv" in model else "--matmul"
    assert "%s dnnl: this CPU has no bf16 instructions for oneDNN (its ISA: avx2)" % flag \
        in r.stderr, r.stderr
    assert "done" not in r.stderr, r.stderr


@pytest.mark.parametrize("model", [CNN + ["--conv", "dnnl"], ["--matmul", "dnnl"]],
                         ids=["cnn-dnnl", "mlp-dnnl"])
def test_bf16_from_a_trial_param_on_a_restart_is_taken_as_after_a_live_load(tmp_path, model):
    # JIZHI_LOAD_CHECKPOINT is the controller's restart standing in for a
    # live load the program did not acknowledge; the live load followed by
    # the trial's params is accepted (bf16 as the emulation), so the restart
    # is too (#38 review12 item 5; before: refused, exit 1)
    ck = str(tmp_path / "ck")
    saved = train("AVX2", *model, "--precision", "fp32", "--save", ck)
    assert saved.returncode == 0, saved.stderr
    r = train("AVX2", *model, "--max-steps", "12",
              env={"JIZHI_PARAMS": json.dumps({"precision": "bf16"}),
                   "JIZHI_LOAD_CHECKPOINT": ck})
    assert r.returncode == 0, r.stderr
    assert "done: 12 steps" in r.stderr, r.stderr
    assert "no bf16 instructions" in r.stderr, r.stderr  # the emulation, said


def test_bf16_cnn_checkpoint_from_a_bf16_cpu_keeps_onednn_under_auto(tmp_path):
    # --conv auto (the default): a bf16 CNN saved where oneDNN has bf16
    # instructions (its layout) and resumed without them keeps the layout its
    # run began on (the checkpoint's conv_route) and runs bf16 as the
    # emulation on oneDNN's fp32 kernels (before: the checkpoint's bf16 chose
    # im2col + GEMM at the resume)
    ck = str(tmp_path / "ck")
    saved = train(None, *CNN, "--precision", "bf16", "--save", ck)
    assert saved.returncode == 0, saved.stderr
    if "bf16 kernels" not in line(saved, "convolutions"):
        pytest.skip("this CPU has no bf16 instructions for oneDNN: " +
                    line(saved, "convolutions"))
    r = train("AVX2", *CNN, "--resume", ck, "--max-steps", "12", "--eval-every", "12",
              "--log-every", "12")
    done(r)
    conv = line(r, "convolutions")
    assert conv.startswith("oneDNN") and "NHWC activations, fp32 kernels (bf16 emulated by " \
        "rounding: no bf16 instructions for oneDNN on this CPU (ISA avx2))" in conv, conv


def metric(p, step, name):
    m = re.search(r"jizhi: step %d %s=(\S+)" % (step, name), p.stderr)
    assert m, p.stderr
    return m.group(1)


def test_resume_takes_the_convolution_path_from_the_checkpoint(tmp_path):
    # the CNN's path is chosen once per process, from the config after the
    # checkpoint's restore: a fp32 checkpoint (oneDNN's layout under AVX2)
    # resumed with --precision bf16 continues in fp32 on oneDNN, bit for bit
    # the uninterrupted run (before: the command line's bf16 chose im2col +
    # GEMM, the train_loss differed at step 16 and --verbose said falsely
    # that the run had bf16 epochs)
    run = CNN + ["--eval-every", "16", "--log-every", "8"]
    ck = str(tmp_path / "ck")
    first = train("AVX2", *run, "--precision", "fp32", "--max-steps", "8", "--save", ck)
    assert first.returncode == 0, first.stderr
    r = train("AVX2", *run, "--precision", "bf16", "--max-steps", "16", "--resume", ck)
    whole = train("AVX2", *run, "--precision", "fp32", "--max-steps", "16")
    assert line(r, "convolutions").startswith("oneDNN"), r.stderr
    assert "fp32 kernels:" in line(r, "convolutions")
    assert "bf16" not in line(r, "convolutions")
    for name in ("train_loss", "val_loss"):
        assert metric(r, 16, name) == metric(whole, 16, name)
    # in reverse, a run begun with a schedule's bf16 epoch ahead (im2col +
    # GEMM) and resumed from its fp32 epoch with only --resume stays there
    # (before: oneDNN's layout); the seed it began with is kept and said
    sched = ["--precision-schedule", "fp32:1,bf16:1", "--seed", "3"]
    ck2 = str(tmp_path / "ck2")
    first = train("AVX2", *run, *sched, "--max-steps", "7", "--save", ck2)
    assert first.returncode == 0, first.stderr
    r = train("AVX2", *run, "--max-steps", "16", "--resume", ck2)
    whole = train("AVX2", *run, *sched, "--max-steps", "16")
    conv = line(r, "convolutions")
    assert conv.startswith("im2col + OpenBLAS GEMM"), conv
    assert conv.endswith("the run started with --precision-schedule fp32:1,bf16:1, from "
                         "the checkpoint, and the layout is chosen once per process, so "
                         "its fp32 epochs run here too, not on oneDNN's fp32 kernels)"), conv
    assert "jizhi-train: --resume: kept from the checkpoint, as its run began: seed=3 " \
        "(this command: 1)" in r.stderr
    for name in ("train_loss", "val_loss"):
        assert metric(r, 16, name) == metric(whole, 16, name)


# a precision schedule switching fp32 -> bf16 after the first epoch (8 steps of
# 64 from 512 examples): the live change, as a `set precision` would make it
SCHED = ["--precision-schedule", "fp32:1,bf16:1", "--max-steps", "16", "--eval-every", "16",
         "--log-every", "8"]


@pytest.mark.parametrize("isa", ["AVX2", "AVX512_CORE"])
def test_mlp_switched_to_bf16_mid_run_takes_the_openblas_emulation(tmp_path, isa):
    p = train(isa, *SCHED)
    assert "fp32 kernels" in line(p, "linears")  # the fp32 epoch on oneDNN
    # --verbose says where the bf16 epochs run (before: nothing at the switch)
    assert line(p, "bf16 from step 9: linears") == (
        "OpenBLAS sgemm, precision emulated by rounding (no bf16 instructions for oneDNN "
        "on this CPU (ISA %s))" % isa.lower())
    # and they ran there, not on oneDNN's fallbacks: the same numbers as the
    # fp32 epoch saved, then resumed into bf16 with --matmul blas (OpenBLAS is
    # not capped by oneDNN's variable)
    ck = str(tmp_path / "ck")
    first = train(isa, *SCHED, "--max-steps", "8", "--save", ck)
    assert first.returncode == 0, first.stderr
    assert done(p) == done(train(None, *SCHED, "--matmul", "blas", "--resume", ck))


def test_cnn_with_bf16_epochs_runs_all_on_the_gemm_path_and_says_why():
    # the convolutions' layout is the run's (NHWC on oneDNN, CNHW with
    # im2col): with bf16 epochs ahead and no bf16 instructions, the fp32
    # epochs run on im2col too, and --verbose says so at the start
    p = train("AVX2", *CNN, *SCHED)
    conv = line(p, "convolutions")
    assert conv.startswith("im2col + OpenBLAS GEMM"), conv
    assert "no bf16 instructions for oneDNN on this CPU (ISA avx2); the run started with " \
        "--precision-schedule fp32:1,bf16:1, and the layout is chosen once per process, " \
        "so its fp32 epochs run here too" in conv, conv
    assert line(p, "bf16 from step 9: convolutions").startswith(
        "im2col + OpenBLAS GEMM, CNHW activations (no bf16 instructions for oneDNN on this "
        "CPU (ISA avx2))")
    assert done(p) == done(train(None, *CNN, *SCHED, "--conv", "gemm"))
    # an fp16 epoch before the bf16 one is named as fp16 (before: "its fp32
    # epochs" during the fp16 epoch)
    p = train("AVX2", *CNN, "--precision-schedule", "fp16:1,bf16:1", "--max-steps", "8")
    assert "so its fp16 epochs run here too" in line(p, "convolutions")
    # on oneDNN's layout an fp16 epoch says it is emulated on fp32 kernels
    p = train("AVX2", *CNN, "--precision", "fp16")
    assert "NHWC activations, fp32 kernels (fp16 emulated by rounding):" in \
        line(p, "convolutions")
    # --conv gemm is named as the reason where it is the reason
    assert line(train("AVX2", *CNN, "--conv", "gemm"), "convolutions").endswith(
        "(--conv gemm)")


def test_cnn_on_onednn_set_live_to_bf16_runs_the_emulation_on_fp32_kernels(jz):
    # a live `set precision=bf16` (through the controller and the helper) on a
    # CNN that started in fp32 on oneDNN's layout, under AVX2: the step after
    # it runs bf16 as the emulation on oneDNN's fp32 kernels, and --verbose
    # says so at the switch (a schedule cannot reach this path: it picks the
    # GEMM path at the start)
    from test_control import daemons, running_trial
    from test_recovery import stop
    ep, ctl, disp = daemons(jz, slots="1")
    try:
        spec = base_spec("live-bf16", [TRAIN, *CNN, "--dataset", "synthetic", "--synthetic-n",
                                       "512", "--batch-size", "64", "--epochs", "100000",
                                       "--threads", "1", "--verbose", "--log-every", "1"],
                         trials=1, parallel=1, env={"ONEDNN_MAX_CPU_ISA": "AVX2",
                                                    "OMP_WAIT_POLICY": "passive"})
        spec["objective"] = {"metric": "val_acc", "mode": "max"}
        jz.run("study", "submit", jz.write_spec(spec), check=0)
        tid = running_trial(jz)
        p = jz.run("trial", "set", str(tid), "precision=bf16", check=0)
        assert "acknowledged" in p.stdout, p.stdout + p.stderr
        logs = os.path.join(jz.dir, "logs")
        found = {}

        def switched():
            for d, _, files in os.walk(logs):
                for f in files:
                    with open(os.path.join(d, f), errors="replace") as fh:
                        text = fh.read()
                    m = re.search(r"jizhi-train: bf16 from step (\d+): convolutions: (.*)", text)
                    n = re.search(r"jizhi-train: convolutions: (.*)", text)
                    if m and n:
                        found.update(step=int(m.group(1)), conv=m.group(2), start=n.group(1))
                        return True
            return False

        jz.wait_for(switched, 60, "the switch to bf16 in the trial's log")
        # steps after the switch are reported: it did not fail there
        jz.wait_for(lambda: (jz.sql("SELECT MAX(step) FROM metrics WHERE trial_id=? AND "
                                    "name='train_loss'", tid)[0][0] or 0) >= found["step"] + 3,
                    60, "3 steps in bf16")
        assert jz.sql("SELECT state FROM trials WHERE id=?", tid)[0][0] == "running"
        jz.run("trial", "stop", str(tid), check=0)
        assert "NHWC activations, fp32 kernels:" in found["start"], found
        assert found["conv"].startswith("oneDNN") and "NHWC activations, fp32 kernels (bf16 " \
            "emulated by rounding: no bf16 instructions for oneDNN on this CPU (ISA avx2))" \
            in found["conv"], found
        losses = jz.sql("SELECT value FROM metrics WHERE trial_id=? AND name='train_loss' "
                        "AND step>=?", tid, found["step"])
        assert losses and all(math.isfinite(v) for (v,) in losses)
    finally:
        stop(ctl, disp)
