"""bench/gemm_libs.py - `make bench-gemm`: the GEMMs jizhi multiplies (the
trainer's MLP at batch 128 and 1024, the CNN's im2col GEMMs at batch 128,
the bo GP's dpotrf/dsyrk/dgemm/dtrsm at n = 200, 500, 1000) through each
library, with PyTorch 1.13's torch.mm / addmm on the same shapes as the peer.

Libraries (one process each; $BUILD/bench/gemm_libs is the C worker, this
file is PyTorch's when run with --torch-worker):
  openblas-<pick>    OpenBLAS with the kernels jizhi picks from cpuid
                     (gemm_libs --pick, common/blaskern.c), OPENBLAS_CORETYPE
  openblas-Prescott  its SSE3 fallback, the one the issue met
  blis               BLIS with the sub-configuration it picks itself
  blis-skx           BLIS forced to its AVX-512 kernels (BLIS_ARCH_TYPE=skx;
                     only on a CPU with AVX-512)
  dnnl-sgemm         oneDNN's dnnl_sgemm (fp32)
  dnnl-matmul        oneDNN's matmul primitive, fp32 (created once per shape)
  dnnl-bf16          the same with bf16 inputs, fp32 output
  torch, torch-bf16  PyTorch (Debian's /usr/bin/python3): float32 (float64
                     for the GP) and bfloat16
Each library runs under `taskset -c` on the first T CPUs with its own thread
control set to T (and OMP_WAIT_POLICY=passive unless set, as jizhi-train
runs oneDNN). One round runs every library once per thread count, in an
order that rotates each round; each number is the median over the rounds of
the worker's time per call (enough back-to-back calls for --target-ms).
GFLOP/s are nominal operations of the call (2mnk for a GEMM; n^2 k for a
syrk, which PyTorch computes as a full mm; n^3/3 for a Cholesky) over time.

  --check   one small case of every shape per library against a double
            reference (no timing); exit 1 when a library is off
  --rounds N (5), --threads 1,2, --target-ms MS (30), --only PREFIX,
  --libs a,b (a subset), --json PATH ($BUILD/bench/gemm_libs.json)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PY = "/usr/bin/python3"


def build_dir():
    build = os.environ.get("BUILD", "build")
    return build if os.path.isabs(build) else os.path.join(ROOT, build)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---- PyTorch worker ---------------------------------------------------------

def _torch_case(torch, sh, dtype, small):
    """Tensors and the call for one shape (small: the --check sizes)."""
    d = dict(sh, **sh["check"]) if small else sh
    op, m, n, k = d["op"], d["m"], d["n"], d["k"]
    g = torch.Generator().manual_seed(7)

    def buf(rows, ld):
        return (torch.rand(rows, ld, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)

    def spd(nn):
        i = torch.arange(nn, dtype=torch.float64)
        dd = 10.0 * (i[:, None] - i[None, :]) / nn
        return (torch.exp(-0.5 * dd * dd) + 1e-2 * torch.eye(nn, dtype=torch.float64)).to(dtype)

    if op == "gemm":
        A = buf(k if d["ta"] else m, d["lda"])
        B = buf(n if d["tb"] else k, d["ldb"])
        C = buf(m, d["ldc"])
        a = A[:, :m].t() if d["ta"] else A[:, :k]
        b = B[:, :k].t() if d["tb"] else B[:, :n]
        c = C[:, :n]
        c0 = c.clone()
        beta = d["beta"]
        if beta == 0:
            def call():
                torch.mm(a, b, out=c)
        else:
            def call():
                c.addmm_(a, b, beta=beta)
        ref = lambda: beta * c0.double() + a.double() @ b.double()
        scale = lambda: abs(beta) * c0.double().abs() + a.double().abs() @ b.double().abs()
        return call, lambda: c, ref, scale, None
    if op == "syrk":  # PyTorch has no syrk: the full product
        a = buf(n, d["lda"])[:, :k]
        c = buf(n, d["ldc"])[:, :n]

        def call():
            torch.mm(a, a.t(), out=c)
        ref = lambda: a.double() @ a.double().t()
        scale = lambda: a.double().abs() @ a.double().abs().t()
        return call, lambda: c, ref, scale, "lower"
    if op == "trsm":  # X L^T = B (gp.c's predict)
        lo = torch.linalg.cholesky(spd(n).double()).to(dtype)
        b = buf(m, d["ldb"])[:, :n]
        out = {}

        def call():
            out["x"] = torch.linalg.solve_triangular(lo.t(), b, upper=True, left=False)
        # residual X L^T against B
        res = lambda: out["x"].double() @ lo.double().t()
        scale = lambda: out["x"].double().abs() @ lo.double().abs().t() + b.double().abs()
        return call, res, (lambda: b.double()), scale, None
    if op == "potrf":
        a = spd(n)
        out = {}

        def call():
            out["l"] = torch.linalg.cholesky(a)
        res = lambda: out["l"].double() @ out["l"].double().t()
        scale = lambda: out["l"].double().abs() @ out["l"].double().abs().t() + a.double().abs()
        return call, res, (lambda: a.double()), scale, "lower"
    return None


def torch_worker(args):
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"lib": args.name, "skip": f"no PyTorch in {sys.executable} ({e})"}))
        return 3
    torch.set_num_threads(args.threads)
    bf = args.dtype == "bf16"
    cfg = torch.__config__.show()
    blas = next((p.split("=", 1)[1] for p in cfg.replace(",", " ").split()
                 if p.startswith("BLAS_INFO=")), "?")
    with open("/proc/self/maps") as f:  # which BLAS library libblas.so.3 is here
        libs = sorted({ln.split()[-1] for ln in f if "blas" in ln.split()[-1]})
    blas += " (" + ", ".join(os.path.basename(os.path.realpath(p)) for p in libs) + ")"
    print(json.dumps({"lib": args.name, "threads": torch.get_num_threads(),
                      "info": f"PyTorch {torch.__version__}; BLAS {blas}; "
                              f"mkldnn {torch.backends.mkldnn.is_available()}"}), flush=True)
    with open(args.shapes) as f:
        shapes = json.load(f)
    bad = 0
    for sh in shapes:
        if not sh["shape"].startswith(args.only) or sh["op"] == "potrf_blk":
            continue
        if bf and sh["dbl"]:
            continue
        dtype = torch.bfloat16 if bf else torch.float64 if sh["dbl"] else torch.float32
        call, got, ref, scale, tri = _torch_case(torch, sh, dtype, args.check)
        if args.check:
            call()
            if os.environ.get("GEMM_LIBS_FAULT") == "1":
                got().view(-1)[0] += 1
            e = (got().double() - ref()).abs() / (scale() + 1e-30)
            if tri == "lower":
                e = torch.tril(e)
            err = float(e.max())
            tol = 1e-9 if sh["dbl"] else 1e-2 if bf else 1e-5
            ok = err <= tol
            bad |= not ok
            print(json.dumps({"shape": sh["shape"], "err": err, "tol": tol, "ok": ok}))
            continue
        call(), call()
        t0 = time.perf_counter()
        call()
        one = time.perf_counter() - t0
        reps = max(3, min(100000, int(args.target_ms / 1000 / one) if one > 0 else 1000))
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        s = (time.perf_counter() - t0) / reps
        print(json.dumps({"shape": sh["shape"], "s": s, "reps": reps,
                          "gflops": sh["flops"] / s * 1e-9, "impl": ""}), flush=True)
    return 1 if bad else 0


# ---- the driver ---------------------------------------------------------------

def configs(worker, pick, want):
    """(name, argv, env) of each library configuration."""
    me = os.path.abspath(__file__)
    out = []
    if pick not in ("", "none"):
        out.append((f"openblas-{pick}", [worker, "--lib", "openblas"],
                    {"OPENBLAS_CORETYPE": pick}))
    out.append(("openblas-Prescott", [worker, "--lib", "openblas"],
                {"OPENBLAS_CORETYPE": "Prescott"}))
    out.append(("blis", [worker, "--lib", "blis"], {}))
    if pick in ("SkylakeX", "Cooperlake"):
        out.append(("blis-skx", [worker, "--lib", "blis"], {"BLIS_ARCH_TYPE": "skx"}))
    for lib in ("dnnl-sgemm", "dnnl-matmul", "dnnl-bf16"):
        out.append((lib, [worker, "--lib", lib], {}))
    for name, dt in (("torch", "native"), ("torch-bf16", "bf16")):
        out.append((name, [TORCH_PY, me, "--torch-worker", "--name", name, "--dtype", dt], {}))
    if want:
        out = [c for c in out if c[0] in want]
    return out


def run_worker(cfg, threads, extra, timeout):
    name, argv, env = cfg
    e = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), BLIS_NUM_THREADS=str(threads),
             OMP_NUM_THREADS=str(threads), **env)
    # OpenMP threads (oneDNN, BLIS, PyTorch) sleep at barriers, as jizhi-train
    # sets for itself and bench/train.sh for both sides; spinning (libgomp's
    # default) lets a shared second core stall every call. Unless set.
    e.setdefault("OMP_WAIT_POLICY", "passive")
    e.pop("JIZHI_BLAS_CORE", None)
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    cmd = ["taskset", "-c", ",".join(map(str, cpus))] + argv + ["--threads", str(threads)] + extra
    try:
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as err:  # no taskset, no /usr/bin/python3
        return 3, [{"lib": name, "skip": f"cannot run {err.filename}"}], ""
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p.returncode, lines, p.stderr


def fmt(v, w=8):
    return f"{v:{w}.1f}" if v is not None else " " * (w - 1) + "-"


def ratio(a, b):
    return a / b if a and b else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch-worker", action="store_true")
    ap.add_argument("--name", default="torch")
    ap.add_argument("--dtype", default="native", choices=("native", "bf16"))
    ap.add_argument("--shapes")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--target-ms", type=float, default=30)
    ap.add_argument("--only", default="")
    ap.add_argument("--libs", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.torch_worker:
        args.threads = int(args.threads)
        return torch_worker(args)

    build = build_dir()
    worker = os.path.join(build, "bench", "gemm_libs")
    if not os.path.exists(worker):
        print(f"gemm_libs: {worker} missing (make {os.path.relpath(worker, ROOT)})",
              file=sys.stderr)
        return 2
    try:
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        threads = []
    if not threads or min(threads) < 1 or args.rounds < 1 or args.target_ms <= 0:
        print("gemm_libs: --threads T[,T...] with T >= 1, --rounds >= 1, --target-ms > 0",
              file=sys.stderr)
        return 2
    ncpu = len(os.sched_getaffinity(0))
    if max(threads) > ncpu:
        print(f"gemm_libs: --threads {max(threads)} but only {ncpu} CPUs", file=sys.stderr)
        return 2
    shapes = [json.loads(ln) for ln in subprocess.run(
        [worker, "--list"], capture_output=True, text=True, check=True).stdout.splitlines()]
    pick = subprocess.run([worker, "--pick"], capture_output=True, text=True).stdout.strip()
    want = set(filter(None, args.libs.split(",")))
    cfgs = configs(worker, pick, want)
    unknown = want - {c[0] for c in cfgs}
    if unknown:
        print(f"gemm_libs: unknown --libs {','.join(sorted(unknown))}", file=sys.stderr)
        return 2
    tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(shapes, tmp)
    tmp.close()
    try:
        return (check if args.check else bench)(args, cfgs, threads, shapes, pick, tmp.name)
    finally:
        os.unlink(tmp.name)


def _extra(cfg, args, shapes_path):
    extra = ["--only", args.only] if args.only else []
    if cfg[1][0] == TORCH_PY:
        extra += ["--shapes", shapes_path, "--target-ms", str(args.target_ms)]
    else:
        extra += ["--target-ms", str(args.target_ms)]
    return extra + (["--check"] if args.check else [])


def check(args, cfgs, threads, shapes, pick, shapes_path):
    failed = 0
    for cfg in cfgs:
        rc, lines, err = run_worker(cfg, 1, _extra(cfg, args, shapes_path), 120)
        head = lines[0] if lines else {}
        if rc == 3:
            print(f"{cfg[0]:18} skipped: {head.get('skip') or err.strip()}")
            continue
        rows = lines[1:]
        bad = [r for r in rows if not r.get("ok")]
        if rc != 0 or bad or not rows:
            failed += 1
            print(f"{cfg[0]:18} FAILED (exit {rc}): " +
                  "; ".join(f"{r['shape']} err {r.get('err', r.get('error'))}" for r in bad[:5])
                  + (f" {err.strip()[-300:]}" if rc not in (0, 1) else ""))
        else:
            worst = max(r["err"] / r["tol"] for r in rows)
            print(f"{cfg[0]:18} ok: {len(rows)} shapes, worst error {worst:.2g} of its "
                  f"tolerance ({head.get('info', '')})")
    return 1 if failed else 0


def bench(args, cfgs, threads, shapes, pick, shapes_path):
    by = {s["shape"]: s for s in shapes}
    times = {}   # (cfg, T, shape) -> [s]
    impl = {}    # (cfg, T, shape) -> oneDNN implementation
    info, skipped = {}, {}
    loads = [loadavg()]
    print(f"gemm_libs: {len(cfgs)} libraries x threads {args.threads} x {args.rounds} rounds; "
          f"jizhi's OpenBLAS pick from cpuid: {pick}; load average {loads[0]}", flush=True)
    live = list(cfgs)
    for r in range(args.rounds):
        for T in threads:
            order = live[r % len(live):] + live[:r % len(live)] if live else []
            for cfg in order:
                if cfg[0] in skipped:
                    continue
                rc, lines, err = run_worker(cfg, T, _extra(cfg, args, shapes_path), 600)
                head = lines[0] if lines else {}
                if rc == 3 or "skip" in head:
                    skipped[cfg[0]] = head.get("skip") or err.strip()
                    continue
                if rc != 0:
                    print(f"gemm_libs: {cfg[0]} (threads {T}) failed, exit {rc}: "
                          f"{err.strip()[-500:]}", file=sys.stderr)
                    return 1
                info[cfg[0]] = head.get("info", "")
                for ln in lines[1:]:
                    key = (cfg[0], T, ln["shape"])
                    times.setdefault(key, []).append(ln["s"])
                    impl[key] = ln.get("impl", "")
        loads.append(loadavg())
        print(f"  round {r + 1}/{args.rounds} done, load average {loads[-1]}", flush=True)
    names = [c[0] for c in cfgs if c[0] not in skipped]
    for n, why in skipped.items():
        print(f"skipped {n}: {why}")
    for n in names:
        print(f"{n:18} {info.get(n, '')}")
    # the core each OpenBLAS worker ran must be the one asked for
    for c in cfgs:
        if c[0].startswith("openblas-") and c[0] in info:
            core = info[c[0]].rsplit("core ", 1)[-1]
            if core != c[2]["OPENBLAS_CORETYPE"]:
                print(f"WARNING: {c[0]} ran core {core}")
    med = {k: statistics.median(v) for k, v in times.items()}
    base = f"openblas-{pick}"

    def peer(n):
        return "torch-bf16" if n.endswith("bf16") else "torch"

    # group totals (a training step's GEMMs, weighted by calls per step)
    groups = []
    for s in shapes:
        if s["group"] not in groups and s["group"].startswith(("mlp", "cnn")):
            groups.append(s["group"])
    rows = [(g, None) for g in groups] + [
        (s["group"], s["shape"]) for s in shapes if s["group"].startswith("gp")]

    def gflops(n, T, g, shape):
        if shape:
            t = med.get((n, T, shape))
            return by[shape]["flops"] / t * 1e-9 if t else None
        fl = tt = 0.0
        for s in shapes:
            if s["group"] != g:
                continue
            t = med.get((n, T, s["shape"]))
            if t is None:
                return None
            fl += s["weight"] * s["flops"]
            tt += s["weight"] * t
        return fl / tt * 1e-9 if tt else None

    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "pick": pick,
           "loadavg": loads, "rounds": args.rounds, "threads": threads,
           "target_ms": args.target_ms, "info": info, "skipped": skipped,
           "shapes": shapes, "median_s": {}, "samples_s": {}, "impl": {}}
    for (n, T, sh), v in med.items():
        out["median_s"].setdefault(n, {}).setdefault(str(T), {})[sh] = v
        out["samples_s"].setdefault(n, {}).setdefault(str(T), {})[sh] = times[(n, T, sh)]
        if impl.get((n, T, sh)):
            out["impl"].setdefault(n, {}).setdefault(str(T), {})[sh] = impl[(n, T, sh)]
    short = {n: n.replace("openblas-", "obl-").replace("Prescott", "presc") for n in names}
    for T in threads:
        print(f"\nGFLOP/s, {T} thread{'s' if T > 1 else ''} (median of {args.rounds}; "
              f"mlp/cnn rows: the step's GEMMs weighted by calls per step)")
        print(f"{'':22}" + "".join(f"{short[n][:10]:>11}" for n in names))
        for g, sh in rows:
            label = sh if sh else f"{g} (step)"
            print(f"{label:22}" + "".join(fmt(gflops(n, T, g, sh), 11) for n in names))
        print(f"\nratio to {base} (>1 faster) / to PyTorch of the same precision, {T} thread"
              f"{'s' if T > 1 else ''}")
        print(f"{'':22}" + "".join(f"{short[n][:10]:>11}" for n in names))
        for g, sh in rows:
            label = sh if sh else f"{g} (step)"
            cells = []
            for n in names:
                v = gflops(n, T, g, sh)
                a, b = ratio(v, gflops(base, T, g, sh)), ratio(v, gflops(peer(n), T, g, sh))
                cells.append(f"{(f'{a:.2f}' if a else '-'):>5}/{(f'{b:.2f}' if b else '-'):<5}")
            print(f"{label:22}" + "".join(c.rjust(11) for c in cells))
    print(f"\nper shape (GFLOP/s; m x n x k, n of a Cholesky; T threads):")
    for s in shapes:
        dims = (f"{s['m']}x{s['n']}x{s['k']}" if s["op"] == "gemm"
                else f"n={s['n']}" + (f" m={s['m']}" if s["op"] == "trsm" else ""))
        for T in threads:
            print(f"{s['shape']:26}{dims:>16} T{T}" +
                  "".join(fmt(gflops(n, T, s["group"], s["shape"]), 11) for n in names))
    print(f"\nload average: {' -> '.join(loads)}")
    path = args.json or os.path.join(build_dir(), "bench", "gemm_libs.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
