"""bench/schedulers_batchsize.py's own measures: the trainer's CPU-seconds,
polled from /proc under an arm's process, and their medians.

jizhi-train re-executes itself before it trains (trainer/main.c,
s_thread_env; common/blaskern.c); until 0eaf1c1 it ran /proc/self/exe, so
its comm was "exe": the poll looked for "jizhi-train" in comm and read 0
CPU-seconds for every arm, and the medians then divided by that 0. The
poll now also reads argv[0] (a process named "exe" is tested here)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import BUILD, ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import schedulers_batchsize as sb  # noqa: E402


def test_the_trainers_cpu_seconds_are_read_under_its_parent():
    trainer = os.path.join(BUILD, "bin", "jizhi-train")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                        "OMP_NUM_THREADS")}
    # a shell as the arm's `jizhi run`: the trainer is its child, not itself
    p = subprocess.Popen(["sh", "-c", '"$0" --dataset synthetic --epochs 1000 '
                          '--max-steps 3000 --threads 1 --quiet; true', trainer], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        comms, cpu, deadline = set(), 0.0, time.time() + 20
        while time.time() < deadline and p.poll() is None and cpu < 0.2:
            time.sleep(0.05)
            for kid in os.listdir("/proc"):
                try:
                    with open("/proc/%s/stat" % kid) as f:
                        st = f.read()
                except OSError:
                    continue
                if kid.isdigit() and int(st[st.rindex(")") + 2:].split()[1]) == p.pid:
                    comms.add(st[st.index("(") + 1:st.rindex(")")])
            cpu = sb.trainer_cpu(p.pid)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the shell and the trainer it started
        except ProcessLookupError:
            pass  # both ended
        p.wait()
    assert cpu >= 0.2, "CPU-s read under the trainer's parent: %r (its children: %r)" % (
        cpu, comms)


def test_a_zero_cpu_measure_does_not_break_the_medians():
    def row(batch, cpu):
        return {"batch": batch, "profile": 1.0, "time": 2.0, "cpu": cpu, "samples": 1000}
    fixed = row(64, 0.0)
    arm = {k: None for k in sb.SCHED_KINDS + ("linear",)}
    arm["batchsize"] = row(64, 0.0)
    s = sb.summarize([{"seed": 1, "best": {m: fixed for m in sb.MEASURES}, "arm": arm}],
                     "profile")
    assert s["profiled_ratio_jizhi_to_best_fixed"] == 1.0
    assert s["cpu_ratio_jizhi_to_least_fixed"] is None  # no ratio to a 0


def _row(batch, time_s, final_b=None):
    return {"batch": batch, "profile": time_s, "time": time_s, "cpu": time_s,
            "samples": 1000, "final_b": final_b or batch}


def test_per_seed_ratios_and_the_goal_by_wall_time():
    # the GPU run of scripts/gpu-check.sh (item 6) ranks by wall time and
    # judges the median of the per-seed ratios against 0.8
    def seed(n, best, sched):
        arm = {k: None for k in sb.SCHED_KINDS + ("linear",)}
        arm["batchsize"] = sched
        return {"seed": n, "best": {m: best for m in sb.MEASURES}, "arm": arm}
    per_seed = [seed(1, _row(2048, 10.0), _row(256, 7.0, 4096)),
                seed(2, _row(1024, 8.0), _row(256, 8.0)),
                seed(3, _row(2048, 9.0), dict(_row(256, 0), time=None, profile=None,
                                              cpu=None))]  # missed the target
    s = sb.summarize(per_seed, "time", goal=0.8)
    assert [(p["seed"], p["best_fixed_batch"], p["ratio"]) for p in s["per_seed"]] == [
        (1, 2048, 0.7), (2, 1024, 1.0), (3, 2048, None)]
    assert s["per_seed"][0]["jizhi_final_batch"] == 4096
    assert s["goal"] == {"ratio": 0.8, "measure": "time_to_target_s", "median_ratio": 1.0,
                         "verdict": "missed"}
    s = sb.summarize(per_seed[:1], "time", goal=0.8)
    assert s["goal"]["verdict"] == "met" and s["goal"]["median_ratio"] == 0.7
    line = sb.goal_line("mlp", dict(s, noise_scale_reported=False))
    assert "median 0.70x over 1 seed(s) (seed 1 0.70x vs fixed 2048): goal <= 0.8x met" in line
    assert "no noise scale" in line
    assert "goal" not in sb.summarize(per_seed, "time")


def test_the_step_time_curve_covers_the_sizes_the_arms_use():
    class A:
        sched_min, sched_max, batches = 256, 8192, [256, 512, 1024, 2048, 4096, 8192]
    assert sb.curve_sizes(A) == [256, 512, 1024, 2048, 4096, 8192]
    A.sched_min, A.sched_max, A.batches = 16, 1024, [16, 48, 256]
    assert sb.curve_sizes(A) == [16, 32, 48, 64, 128, 256, 512, 1024]


GPU_ARGS = ["--models", "mlp", "--trainer", "jizhi-train-cuda", "--trainer-args=--backend cuda",
            "--throughput", "wall", "--rank", "time", "--seeds", "2", "--batches",
            "256,512,1024,2048,4096,8192", "--sched-min", "256", "--sched-start", "256",
            "--sched-max", "8192", "--sweep", "1,2", "--arms", "fixed,batchsize", "--goal",
            "0.8"]


def _bench(args, **env):
    e = dict(os.environ, BUILD=BUILD, **env)
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench",
                                                        "schedulers_batchsize.py")] + args,
                          capture_output=True, text=True, env=e, timeout=60)


def test_dry_run_shows_the_cuda_trainers_commands_and_trains_nothing():
    # gpu-check's item-6 arguments: the curve at 256..8192, 12 fixed arms (6
    # sizes x 2 rates) and the scheduler from 256 to 8192 on wall time, every
    # trainer command ending in --backend cuda
    cuda = os.path.join(BUILD, "bin", "jizhi-train-cuda")
    if not os.path.exists(cuda):
        pytest.skip("no jizhi-train-cuda in %s (make cuda: needs nvcc)" % BUILD)
    p = _bench(GPU_ARGS + ["--dry-run"])
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("mlp: target val_acc 0.86; step-time curve at "
                               "256,512,1024,2048,4096,8192; first: jizhi-train-cuda ")
    specs = [json.loads(l) for l in lines[1:]]
    assert [x["scheduler"]["type"] for x in specs] == ["random"] * 12 + ["batchsize"]
    sched = specs[-1]["scheduler"]
    assert (sched["min"], sched["max"], sched["throughput"]) == (256, 8192, "wall")
    for x in specs:
        cmd = x["trial"]["command"]
        assert cmd[0] == "jizhi-train-cuda" and "--backend" in cmd, cmd
        assert cmd[cmd.index("--backend") + 1] == "cuda"
    # the trainer takes every flag: no usage error (exit 2) from the CUDA
    # binary; with no GPU here it stops later, at the device (exit 1)
    first = lines[0].split("first: ", 1)[1].split()
    r = subprocess.run([cuda] + first[1:] + ["--max-steps", "1"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 2 and "unknown flag" not in r.stderr, r.stderr


def test_a_trainer_that_is_not_there_is_named():
    p = _bench(GPU_ARGS[:2] + ["--trainer", "no-such-trainer", "--dry-run"])
    assert p.returncode == 2 and "no-such-trainer" in p.stderr, p.stdout + p.stderr
    p = _bench(["--models", "gpu", "--dry-run"])
    assert p.returncode != 0 and "unknown setting 'gpu'" in p.stderr, p.stdout + p.stderr


def test_a_trainer_named_exe_is_found_by_its_argv0(tmp_path):
    # the trainer as it was until 0eaf1c1: comm "exe" (it ran /proc/self/exe),
    # argv[0] its name; and a process that is not the trainer
    exe = tmp_path / "exe"
    exe.symlink_to("/bin/sleep")
    named = subprocess.Popen(["bash", "-c", 'exec -a jizhi-train "$0" 30', str(exe)])
    other = subprocess.Popen([str(exe), "30"])
    try:
        for _ in range(200):  # until bash has exec'd
            with open("/proc/%d/comm" % named.pid) as f:
                if f.read().strip() == "exe":
                    break
            time.sleep(0.01)
        assert sb.is_trainer(named.pid, "exe")
        assert not sb.is_trainer(other.pid, "exe")
        assert sb.is_trainer(other.pid, "jizhi-train-cud")  # comm holds 15 characters
    finally:
        for p in (named, other):
            p.kill()
            p.wait()
