"""scale_plot.py - draws build/bench/scale.json (bench/scale.sh) as an SVG:
latency (trial set p50/p99, web API p99) and the controller's CPU share
against running trials, log-log. No plotting library: the SVG is written
by hand. usage: python3 bench/scale_plot.py [scale.json] [out.svg]"""
import json
import math
import sys

W, H, M = 720, 330, 60  # size, margin


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "build/bench/scale.json"
    dst = sys.argv[2] if len(sys.argv) > 2 else "docs/scale.svg"
    levels = [l for l in json.load(open(src))["levels"]
              if l["level"] != "ingest" and l.get("running")]
    levels.sort(key=lambda l: l["running"])
    series = [("trial set p50 (ms)", "set_p50_ms", "#1f77b4", ""),
              ("trial set p99 (ms)", "set_p99_ms", "#1f77b4", "6,4"),
              ("web API p99 (ms)", "api_p99_ms", "#d62728", "6,4"),
              ("controller CPU (% of a core)", "cpu_pct", "#2ca02c", "")]
    for l in levels:
        l["cpu_pct"] = 100 * l["ctl_cpu_steady_frac"] if l.get("ctl_cpu_steady_frac", -1) > 0 else None
    xs = [l["running"] for l in levels]
    ys = [l[k] for l in levels for _, k, _, _ in series if l.get(k)]
    x0, x1 = math.log10(min(xs)) - 0.1, math.log10(max(xs)) + 0.1
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    px = lambda x: M + (math.log10(x) - x0) / (x1 - x0) * (W - 2 * M - 150)
    py = lambda y: H - M + (math.log10(y) - y0) / (y1 - y0) * (2 * M - H)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{M}" y="20">jizhi controller under bench/scale.sh (medians; 2 shared cores)</text>']
    for e in range(y0, y1 + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{M}" y1="{y:.1f}" x2="{W - M - 150}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{M - 8}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    for x in xs:
        out.append(f'<line x1="{px(x):.1f}" y1="{M}" x2="{px(x):.1f}" y2="{H - M}" stroke="#eee"/>')
        out.append(f'<text x="{px(x):.1f}" y="{H - M + 16}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{(W - 150) / 2}" y="{H - 18}" text-anchor="middle">running trials</text>')
    for i, (label, key, color, dash) in enumerate(series):
        pts = [(px(l["running"]), py(l[key])) for l in levels if l.get(key)]
        if pts:
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2" '
                       f'stroke-dasharray="{dash}"/>')
            out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in pts]
        ly = M + 18 * i
        out.append(f'<line x1="{W - M - 140}" y1="{ly}" x2="{W - M - 115}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{W - M - 110}" y="{ly + 4}" font-size="10">{label}</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
