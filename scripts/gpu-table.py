#!/usr/bin/env python3
"""Turn scripts/gpu-check.sh's JSON into trainer/README.md's table of GPU results.

    scripts/gpu-table.py build/gpu-check.json             # the markdown on stdout
    scripts/gpu-table.py RUN.json --readme trainer/README.md
    scripts/gpu-table.py RUN.json --second CALL2.json --readme trainer/README.md

With --readme, the text between the lines `<!-- gpu-check:begin -->` and
`<!-- gpu-check:end -->` of that file is replaced by the table; the rest of
the file is kept byte for byte. gpu-check.sh writes the same markdown next to
its JSON (`gpu-check.md`, in $OUT on a lent machine), so a run's table comes
back even where the repository's files do not.

--second takes what a second call ran (`BS_ONLY=1`: item 6, the
batch-size scheduler; `LARS_ONLY=1`: item 4's LARS at batch 8192) from its
JSON: a part it ran replaces the first call's, and its reason for not
running a part replaces the first's only where the first was not asked to
run it.

Only a run on a GPU goes into a README: a JSON of the CPU stand-in
(`gpu-check.sh --cpu`, "mode" other than "gpu") is refused there. A speed the
run did not measure (a failed or skipped run, null in the JSON) is shown as
`-`, never as a number, and its goal as "not measured"; a goal is judged
on the two samples/s, not on the ratio rounded for display.

Errors (exit 2, nothing written): a file that cannot be read, is not JSON or
is not gpu-check's; a README without exactly one pair of markers in order;
--readme with a stand-in run.

Standard library only (and bench/scaling_model.py's loader): it runs with
whatever python3 the machine has.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
from scaling_model import Bad, load_gpu_check  # noqa: E402  (the JSON's loader, shared)

BEGIN = "<!-- gpu-check:begin -->"
END = "<!-- gpu-check:end -->"

# issue 38's goals, one per table: (least jizhi / PyTorch samples/s, the
# batches, the precisions it is about); rows outside them are shown, not judged
MLP_GOAL = (1.0, 128, 65536, ("fp32", "bf16"))  # item 3: the same model and precision
CNN_GOAL = (0.9, 256, 8192, ("bf16", "fp16"))  # item 4: against PyTorch AMP, channels_last


def cell(v):
    """A measured number as the table shows it; '-' for one not measured."""
    if v is None:
        return "-"
    return f"{round(v):,}".replace(",", " ")


def verdict(row, peer, goal):
    """The row's verdict against a goal, judged on the two samples/s (the
    stored ratio is rounded to 2 decimals: 0.996 would pass as 1.00)."""
    least, lo, hi, precs = goal
    if not lo <= row["batch"] <= hi or row["precision"] not in precs:
        return "(no goal)"
    ours, theirs = row.get("jizhi_cuda"), row.get(peer)
    if not isinstance(ours, (int, float)) or not isinstance(theirs, (int, float)) or theirs <= 0:
        return "not measured"
    return "met" if ours >= least * theirs else "**missed**"


def speed_table(rows, cols, goal, title):
    """Markdown rows for one speed table; cols: (heading, key) pairs, the
    last one PyTorch's samples/s."""
    out = [title, ""]
    if not rows:
        return out + ["No row: this run measured no speed here.", ""]
    out.append("| batch | precision | " + " | ".join(h for h, _ in cols) + " | ratio | goal |")
    out.append("|---" * (len(cols) + 4) + "|")
    judged = []
    for r in sorted(rows, key=lambda r: (r["precision"], r["batch"])):
        vals = " | ".join(cell(r.get(k)) for _, k in cols)
        ratio = r.get("ratio")
        judged.append(verdict(r, cols[-1][1], goal))
        out.append(f"| {r['batch']} | {r['precision']} | {vals} | "
                   f"{'-' if ratio is None else f'{ratio:.2f}x'} | {judged[-1]} |")
    n = sum(v != "(no goal)" for v in judged)
    out += ["", f"Goal met in {judged.count('met')} of the {n} rows it is about "
            f"({judged.count('not measured')} not measured).", ""]
    return out


def scaling_table(models):
    """Item 5: the alpha-beta model's efficiency at the most GPUs it projects,
    per measured batch (bench/scaling_model.py's JSON, one per model), or why
    a model has none."""
    out = ["Scaling model (item 5: alpha-beta, weak scaling, fed with the bf16 step times "
           "above; the links and the backward's share assumed):", ""]
    if not models:
        return out + ["Not made: this run did not reach it.", ""]
    for m, sc in sorted(models.items()):
        if not isinstance(sc, dict) or "batches" not in sc:
            why = sc.get("skipped") if isinstance(sc, dict) else None
            out += [f"{m}: not made ({why or 'no reason recorded'}).", ""]
            continue
        try:
            out += s_scaling_rows(m, sc)
        except (KeyError, TypeError, ValueError) as e:  # not scaling_model.py's shape
            out += [f"{m}: its projection cannot be read ({type(e).__name__}: {e}).", ""]
    return out


def s_scaling_rows(m, sc):
    """One model's lines of scaling_table (KeyError and the like where sc is
    not scaling_model.py's JSON)."""
    rows = [r for b in sc["batches"] for r in b["rows"]]
    top = max(r["gpus"] for r in rows)
    out = [f"{m}: {sc['bytes_per_allreduce'] / 1e6:.3f} MB an all-reduce, alpha "
           f"{sc['alpha_s'] * 1e6:g} us, {sc['intra_Bps'] / 1e9:g} GB/s inside a node "
           f"of {sc['gpus_per_node']}, {sc['inter_Bps'] * 8 / 1e9:g} Gb/s between nodes", "",
           f"| batch a GPU | step ms (from the measured samples/s) | {top} GPUs, flat ring | "
           f"{top} GPUs, hierarchical |", "|---|---|---|---|"]
    for b in sc["batches"]:
        eff = {r["scheme"]: r["eff"] for r in b["rows"] if r["gpus"] == top}
        out.append(f"| {b['batch']} | {b['step_s'] * 1e3:.3f} | "
                   f"{eff.get('flat ring', 0):.1%} | {eff.get('hierarchical', 0):.1%} |")
    return out + [""]


def item6_line(bs):
    """Item 6's sentence: the bench's own verdict against its --goal."""
    ratio = bs.get("median_ratio")
    if bs.get("state") != "run":
        return f"not run ({bs.get('state', 'absent')}: {bs.get('reason') or 'no reason given'})"
    if ratio is None:
        return f"ran, no ratio (verdict: {bs.get('verdict') or 'none'})"
    v = bs.get("verdict") or "no verdict"
    return (f"median time to the target {ratio:.2f}x the best fixed batch: "
            f"{'**missed**' if v == 'missed' else v}")


def lars_line(lars):
    """Item 4's accuracy goal on the GPU (gpu-check's LARS_ONLY section)."""
    if lars.get("state") != "run":
        arms = "; ".join(f"batch {b}: " + (f"test_acc {a['test_acc']:.4f} in {a['seconds']} s"
                                            if "test_acc" in a else
                                            f"{a.get('state')} ({a.get('reason')})")
                         for b, a in sorted((lars.get("arms") or {}).items()))
        return (f"not run ({lars.get('state', 'absent')}: {lars.get('reason') or 'no reason given'}"
                f"{'; ' + arms if arms else ''})")
    v = lars["verdict"]
    return (f"test_acc {lars['test_acc_8192']:.4f} against batch 256's {lars['test_acc_256']:.4f} "
            f"after {lars['epochs']} epochs, {lars['points_below']:.2f} points below: "
            f"{'**missed**' if v == 'missed' else v}")


def render(run, source, second=None):
    """The markdown section for one gpu-check JSON (a dict)."""
    gpu = run.get("mode") == "gpu"
    fails = [c["check"] for c in run["checks"] if not c["ok"]]
    out = [f"Written by `scripts/gpu-table.py` from `{source}` "
           f"(`scripts/gpu-check.sh`, run of {run.get('date', '?')}).", ""]
    if not gpu:
        out += ["**CPU stand-in run (`--cpu`): it checks the script, not a GPU; "
                "no number below is a GPU's.**", ""]
    gpus = run.get("gpus") or ["none listed"]
    out += [f"- GPU: {'; '.join(gpus)}",
            f"- exit status {run.get('exit_status')}, {run.get('elapsed_s')} s "
            f"({'within' if run.get('within_10_min') else 'over'} the 10 minutes), "
            f"{run.get('runs_past_deadline', 0)} runs not made past the deadline",
            f"- preflight: {run.get('preflight') or 'not reached'}",
            f"- checks: {len(run['checks']) - len(fails)} ok, {len(fails)} FAIL", ""]
    if fails:
        out += ["Failed checks:", ""] + [f"- `{f}`" for f in fails] + [""]
    out += speed_table(run.get("speed_mlp") or [],
                       [("jizhi-train-cuda", "jizhi_cuda"),
                        ("host data", "jizhi_cuda_host_data"), ("PyTorch", "pytorch")],
                       MLP_GOAL, "MLP 784-256-256-10, samples/s (goal: >= 1.0x PyTorch at the "
                       "same precision, data on the device for both, batch 128-65 536):")
    out += speed_table(run.get("speed_cnn") or [],
                       [("jizhi-train-cuda", "jizhi_cuda"), ("PyTorch channels_last", "pytorch_cl")],
                       CNN_GOAL, "Residual CNN, samples/s (goal: >= 0.9x PyTorch AMP "
                       "channels_last in bf16 and fp16, batch 256-8192; fp32 rows against "
                       "PyTorch fp32, no goal):")
    out += scaling_table(run.get("scaling_model") or {})
    src = {k: f" (from `{second[k]}`)" if second and k in second else ""
           for k in ("batchsize_gpu", "lars_gpu")}
    out += [f"LARS at batch 8192 (item 4, goal: within 1 point of batch 256's SGD, the CNN in "
            f"bf16){src['lars_gpu']}: {lars_line(run.get('lars_gpu') or {})}.", "",
            f"Batch-size scheduler (item 6, goal: the bench's, <= 0.8x by default)"
            f"{src['batchsize_gpu']}: {item6_line(run.get('batchsize_gpu') or {})}.", ""]
    return "\n".join(out)


def splice(readme, section):
    """readme's text with the text between the markers replaced by section."""
    try:
        with open(readme, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise Bad(f"{readme}: cannot read: {e.strerror}")
    lines = text.split("\n")
    b = [i for i, l in enumerate(lines) if l.strip() == BEGIN]
    e = [i for i, l in enumerate(lines) if l.strip() == END]
    if len(b) != 1 or len(e) != 1 or b[0] > e[0]:
        raise Bad(f"{readme}: needs one line '{BEGIN}' and, after it, one line '{END}' "
                  f"(found {len(b)} and {len(e)})")
    return "\n".join(lines[:b[0] + 1] + [section.rstrip("\n")] + lines[e[0]:])


def write(path, text):
    """Replace path's content with text at once (a temporary file renamed over it)."""
    tmp = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(os.path.abspath(path)),
                                         delete=False, encoding="utf-8") as f:
            tmp = f.name
            f.write(text)
        os.chmod(tmp, os.stat(path).st_mode & 0o777)
        os.replace(tmp, path)
    except OSError as e:
        if tmp:
            os.unlink(tmp)
        raise Bad(f"{path}: cannot write: {e.strerror}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", help="gpu-check.sh's JSON (build/gpu-check.json, or $OUT's copy)")
    p.add_argument("--second", help="a second call's JSON (BS_ONLY=1 or LARS_ONLY=1): what it "
                   "ran, where the first has no result")
    p.add_argument("--readme", help="write the table between the markers of this file")
    a = p.parse_args(argv)
    try:
        run = load_gpu_check(a.json)
        taken = {}
        if a.second:
            second = load_gpu_check(a.second)
            if second.get("mode") != run.get("mode"):
                raise Bad(f"{a.second}: mode '{second.get('mode')}' differs from {a.json}'s")
            for k in ("batchsize_gpu", "lars_gpu"):
                mine = (run.get(k) or {}).get("state", "not asked")
                theirs = (second.get(k) or {}).get("state", "not asked")
                # the second call's result where it ran the part; its reason
                # for not running it only where the first was not asked to
                if theirs == "run" or (mine == "not asked" and theirs != "not asked"):
                    run[k] = second[k]
                    taken[k] = os.path.basename(a.second)
        section = render(run, os.path.basename(a.json), taken)
        if not a.readme:
            sys.stdout.write(section)
            return 0
        if run.get("mode") != "gpu":
            raise Bad(f"{a.json}: a CPU stand-in run (mode '{run.get('mode')}'): "
                      f"it has no GPU numbers for {a.readme}")
        text = splice(a.readme, section)
        write(a.readme, text)
        print(f"gpu-table: {a.readme}: table written from {a.json}")
        return 0
    except Bad as e:
        print(f"gpu-table: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
