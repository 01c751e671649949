#!/usr/bin/env python3
"""Turn scripts/gpu-check.sh's JSON into trainer/README.md's table of GPU results.

    scripts/gpu-table.py build/gpu-check.json             # the markdown on stdout
    scripts/gpu-table.py RUN.json --readme trainer/README.md
    scripts/gpu-table.py RUN.json --item6 BS_ONLY_RUN.json --readme trainer/README.md

With --readme, the text between the lines `<!-- gpu-check:begin -->` and
`<!-- gpu-check:end -->` of that file is replaced by the table; the rest of
the file is kept byte for byte. gpu-check.sh writes the same markdown next to
its JSON (`gpu-check.md`, in $OUT on a lent machine), so a run's table comes
back even where the repository's files do not.

--item6 takes the batch-size scheduler's part (item 6) from a second run,
the `BS_ONLY=1` call that follows a first call whose bench did not run.

Only a run on a GPU goes into a README: a JSON of the CPU stand-in
(`gpu-check.sh --cpu`, "mode" other than "gpu") is refused there. A speed the
run did not measure (a failed or skipped run, null in the JSON) is shown as
`-`, never as a number, and its goal as "not measured".

Errors (exit 2, nothing written): a file that cannot be read, is not JSON or
is not gpu-check's; a README without exactly one pair of markers in order;
--readme with a stand-in run.

Standard library only: it runs with whatever python3 the machine has.
"""
import argparse
import json
import os
import sys
import tempfile

BEGIN = "<!-- gpu-check:begin -->"
END = "<!-- gpu-check:end -->"

# issue 38's goals, one per table (ratio = jizhi / PyTorch samples/s)
MLP_GOAL = (1.0, 128, 65536)  # item 3: >= 1.0x at every batch 128..65 536
CNN_GOAL = (0.9, 256, 8192)  # item 4: >= 0.9x PyTorch AMP channels_last, 256..8192
BS_GOAL = 0.8  # item 6: median time to target <= 0.8x the best fixed batch


class Bad(Exception):
    """A user error: its message is printed, the exit status is 2."""


def cell(v):
    """A measured number as the table shows it; '-' for one not measured."""
    if v is None:
        return "-"
    return f"{round(v):,}".replace(",", " ")


def verdict(ratio, batch, goal):
    """The row's verdict against a (ratio, lowest batch, highest batch) goal."""
    least, lo, hi = goal
    if not lo <= batch <= hi:
        return "(outside the goal's batches)"
    if ratio is None:
        return "not measured"
    return "met" if ratio >= least else "**missed**"


def speed_table(rows, cols, goal, title):
    """Markdown rows for one speed table; cols: (heading, key) pairs."""
    out = [title, ""]
    if not rows:
        return out + ["No row: this run measured no speed here.", ""]
    out.append("| batch | precision | " + " | ".join(h for h, _ in cols) + " | ratio | goal |")
    out.append("|---" * (len(cols) + 4) + "|")
    for r in sorted(rows, key=lambda r: (r["precision"], r["batch"])):
        vals = " | ".join(cell(r.get(k)) for _, k in cols)
        ratio = r.get("ratio")
        out.append(f"| {r['batch']} | {r['precision']} | {vals} | "
                   f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
                   f"{verdict(ratio, r['batch'], goal)} |")
    judged = [verdict(r.get("ratio"), r["batch"], goal) for r in rows]
    n = sum(v != "(outside the goal's batches)" for v in judged)
    out += ["", f"Goal met in {judged.count('met')} of the {n} rows at its batches "
            f"({judged.count('not measured')} not measured).", ""]
    return out


def scaling_table(models):
    """Item 5: the alpha-beta model's efficiency at the most GPUs it projects,
    per measured batch (bench/scaling_model.py's JSON, one per model)."""
    out = ["Scaling model (item 5: alpha-beta, weak scaling, fed with the bf16 step times "
           "above; links and backward share assumed):", ""]
    if not models:
        return out + ["Not made: no bf16 speed row measured.", ""]
    for m, sc in sorted(models.items()):
        rows = [r for b in sc["batches"] for r in b["rows"]]
        top = max(r["gpus"] for r in rows)
        out += [f"{m}: {sc['wire_bytes'] / 1e6:.3f} MB a step on the wire, alpha "
                f"{sc['alpha_s'] * 1e6:g} us, {sc['intra_Bps'] / 1e9:g} GB/s inside a node "
                f"of {sc['gpus_per_node']}, {sc['inter_Bps'] * 8 / 1e9:g} Gb/s between nodes", "",
                f"| batch a GPU | step ms (measured) | {top} GPUs, flat ring | "
                f"{top} GPUs, hierarchical |", "|---|---|---|---|"]
        for b in sc["batches"]:
            eff = {r["scheme"]: r["eff"] for r in b["rows"] if r["gpus"] == top}
            out.append(f"| {b['batch']} | {b['step_s'] * 1e3:.3f} | "
                       f"{eff.get('flat ring', 0):.1%} | {eff.get('hierarchical', 0):.1%} |")
        out.append("")
    return out


def render(run, source, bs_source=None):
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
                       MLP_GOAL, "MLP 784-256-256-10, samples/s (goal: >= 1.0x PyTorch, "
                       "data on the device for both, batch 128-65 536):")
    out += speed_table(run.get("speed_cnn") or [],
                       [("jizhi-train-cuda", "jizhi_cuda"), ("PyTorch channels_last", "pytorch_cl")],
                       CNN_GOAL, "Residual CNN, samples/s (goal: >= 0.9x PyTorch AMP "
                       "channels_last, batch 256-8192):")
    out += scaling_table(run.get("scaling_model") or {})
    bs = run.get("batchsize_gpu") or {}
    ratio = bs.get("median_ratio")
    if bs.get("state") != "run":
        line = f"not run ({bs.get('state', 'absent')}: {bs.get('reason') or 'no reason given'})"
    elif ratio is None:
        line = f"ran, no ratio (verdict: {bs.get('verdict') or 'none'})"
    else:
        line = (f"median time to the target {ratio:.2f}x the best fixed batch: "
                f"{'met' if ratio <= BS_GOAL else '**missed**'}")
    src = f" (from `{bs_source}`)" if bs_source else ""
    out += [f"Batch-size scheduler (item 6, goal <= {BS_GOAL}x){src}: {line}.", ""]
    return "\n".join(out)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
    except OSError as e:
        raise Bad(f"{path}: cannot read: {e.strerror}")
    except ValueError as e:
        raise Bad(f"{path}: not JSON: {e}")
    if not isinstance(run, dict) or not isinstance(run.get("checks"), list) or "mode" not in run:
        raise Bad(f"{path}: not a gpu-check.sh result (no 'mode' and 'checks')")
    for key in ("speed_mlp", "speed_cnn"):
        for r in run.get(key) or []:
            if not isinstance(r, dict) or not isinstance(r.get("batch"), int) or "precision" not in r:
                raise Bad(f"{path}: a row of '{key}' has no batch and precision: {r!r}")
    return run


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
    p.add_argument("--item6", help="a BS_ONLY=1 run's JSON: item 6 from it")
    p.add_argument("--readme", help="write the table between the markers of this file")
    a = p.parse_args(argv)
    try:
        run = load(a.json)
        bs_source = None
        if a.item6:
            second = load(a.item6)
            if second.get("mode") != run.get("mode"):
                raise Bad(f"{a.item6}: mode '{second.get('mode')}' differs from {a.json}'s")
            run["batchsize_gpu"] = second.get("batchsize_gpu") or {}
            bs_source = os.path.basename(a.item6)
        section = render(run, os.path.basename(a.json), bs_source)
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
