"""bench/pbt_ray.py - the Ray Tune arm of bench/schedulers_pbt.py (run by it
with the benchmark's own Python environment that has ray[tune]; never a
runtime dependency of jizhi).

Ray Tune's PopulationBasedTraining over the same jizhi-train, as a function
trainable: each training iteration runs jizhi-train standalone for
`interval` steps (--max-steps to the iteration's end, --resume from the
trial's last checkpoint, --save a new one, the trial's params in
JIZHI_PARAMS, which win over the checkpoint's config after --resume, as in
a live load). Ray exploits by restoring the donor's checkpoint into the
receiver and runs the population on `cpus` CPUs, `cpu_per_trial` each
(trials beyond cpus/cpu_per_trial wait, paused at a checkpoint: PBT yields
to them at each result).

Input: a JSON file (argv[1]) with command, configs (the initial params, one
per member), interval, iterations, cpus, cpu_per_trial, seed, space, perturb, quantile,
resample_p, workdir. Output: a JSON object on the last stdout line.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining
    from ray.tune.search.basic_variant import BasicVariantGenerator

    t0 = time.time()
    work = cfg["workdir"]
    scratch = os.path.join(work, "scratch")
    os.makedirs(scratch, exist_ok=True)
    command, interval = cfg["command"], cfg["interval"]
    # Every member's budget is `total` steps, as jizhi's --max-steps: a
    # receiver restores its donor's step, so counting its own iterations
    # (Ray's training_iteration) let members that copied a donor ahead of
    # them train past it (2750 of 2500 steps, measured).
    total = interval * cfg["iterations"]
    val_re = re.compile(r"^jizhi: step (\d+) val_acc=(\S+)$", re.M)
    test_re = re.compile(r"^jizhi: step (\d+) test_acc=(\S+)$", re.M)

    def trainable(config):
        ck = tune.get_checkpoint()
        step, resume = 0, None
        if ck:
            d = ck.to_directory(tempfile.mkdtemp(dir=scratch))
            with open(os.path.join(d, "step")) as f:
                step = int(f.read())
            resume = os.path.join(d, "model.jzck")
        env = {k: v for k, v in os.environ.items() if not k.startswith("JIZHI_")}
        env["JIZHI_PARAMS"] = json.dumps({k: config[k] for k in cfg["space"]})
        while True:
            target = min(step + interval, total) if step < total else step
            out = tempfile.mkdtemp(dir=scratch)
            cmd = list(command) + ["--max-steps", str(target), "--save",
                                   os.path.join(out, "model.jzck")]
            if resume:
                cmd += ["--resume", resume]
            with open(os.path.join(work, "starts.log"), "a") as f:
                f.write("1\n")
            p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
            if p.returncode != 0:
                raise RuntimeError("jizhi-train failed: " + p.stderr[-500:])
            vals = [(int(s), float(v)) for s, v in val_re.findall(p.stderr)]
            val = vals[-1][1] if vals and vals[-1][0] == target else float("nan")
            tests = [float(v) for s, v in test_re.findall(p.stderr) if int(s) == target]
            test = tests[-1] if tests else float("nan")
            with open(os.path.join(out, "step"), "w") as f:
                f.write(str(target))
            step, resume = target, os.path.join(out, "model.jzck")
            tune.report({"val_acc": val, "test_acc": test, "step": target,
                         "lr_now": config["lr"]},
                        checkpoint=tune.Checkpoint.from_directory(out))

    mutations = {}
    for name, p in cfg["space"].items():
        if p.get("log"):
            mutations[name] = tune.loguniform(p["low"], p["high"])
        else:
            mutations[name] = tune.uniform(p["low"], p["high"])
    pbt = PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=1,
        hyperparam_mutations=mutations, quantile_fraction=cfg["quantile"],
        resample_probability=cfg["resample_p"],
        perturbation_factors=(cfg["perturb"][1], cfg["perturb"][0]))
    random.seed(cfg["seed"])  # PBT draws from the driver's `random`
    ray.init(num_cpus=cfg["cpus"], include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    t_init = time.time() - t0
    RunConfig = getattr(tune, "RunConfig", None)
    CheckpointConfig = getattr(tune, "CheckpointConfig", None)
    if RunConfig is None:
        from ray.train import CheckpointConfig, RunConfig  # older Ray
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": cfg["cpu_per_trial"]}),
        param_space={k: mutations[k] for k in cfg["space"]},
        tune_config=tune.TuneConfig(
            metric="val_acc", mode="max", scheduler=pbt, num_samples=len(cfg["configs"]),
            search_alg=BasicVariantGenerator(points_to_evaluate=cfg["configs"]),
            reuse_actors=False),
        run_config=RunConfig(
            name="pbt", storage_path=os.path.join(work, "ray_results"), verbose=0,
            stop={"step": total},
            # every checkpoint is kept: with num_to_keep=2 a donor's
            # checkpoint could be deleted before its receiver restored it,
            # and the receiver failed ("does not exist on storage anymore":
            # 2 of 8 members in a measured run)
            checkpoint_config=CheckpointConfig(num_to_keep=None)))
    results = tuner.fit()
    wall = time.time() - t0
    finals = [float(r.metrics.get("val_acc", float("nan"))) for r in results]
    tests = [float(r.metrics.get("test_acc", float("nan"))) for r in results]
    steps = [int(r.metrics.get("step", -1)) for r in results]
    with open(os.path.join(work, "starts.log")) as f:
        starts = len(f.read().split())
    ray.shutdown()
    print(json.dumps({"finals": finals, "tests": tests, "steps": steps, "wall": wall,
                      "errors": int(getattr(results, "num_errors", 0)), "ray_init_s": t_init,
                      "perturbations": int(getattr(pbt, "_num_perturbations", -1)),
                      "process_starts": starts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
