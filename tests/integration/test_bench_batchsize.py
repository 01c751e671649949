"""bench/schedulers_batchsize.py's own measures: the trainer's CPU-seconds,
polled from /proc under an arm's process, and their medians.

jizhi-train re-executes itself through /proc/self/exe before it trains
(trainer/main.c, s_thread_env; common/blaskern.c), so its comm is "exe":
the poll looked for "jizhi-train" in comm and read 0 CPU-seconds for every
arm, and the medians then divided by that 0."""
import os
import signal
import subprocess
import sys
import time

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
