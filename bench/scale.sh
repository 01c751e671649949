#!/usr/bin/env bash
# scale.sh - `make bench-scale`: one controller under a simulated cluster.
# For each level (LEVELS: "NAME:DISPS:SLOTS:METRICS:PERIOD_MS", DISPS x SLOTS
# running trials, each reporting METRICS points every PERIOD_MS) a fresh
# `jizhi controller` on tcp://127.0.0.1 with CURVE and a fresh SQLite store
# gets bench/scale_rig (fake dispatchers and trials, USERS users submitting
# and steering with trial set ... wait), while a reader polls the web API
# (`jizhi serve` on the same store) as a user's tables would: the study list
# (GET /api/studies) and, in turn, the first page of a study's trials
# (GET /api/studies/u0/trials?limit=1000: the page's first draw, 1 000 of
# the study's 2 500 at the 10 000 level; docs/WEB.md). Until issue 43's
# paging it read the whole trial list, every trial of u0 in one answer.
# After the level the controller is stopped and the store is counted:
# lost = acknowledged points missing from it. Writes $OUT (default
# $BUILD/bench/scale.json): per level the rig's numbers, plus the summary
# keys dispatch_per_s, set_p99_ms {"100","1000","10000"}, points_per_s,
# api_p99_ms, rss_mb, lost, ctl_cpu. QUICK=1: one small level (CI; the test
# tests/integration/test_bench_scale.py asserts nothing is lost).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
USERS=${USERS:-4}
STEADY_S=${STEADY_S:-20}
OUT=${OUT:-$BUILD/bench/scale.json}
REPEAT=${REPEAT:-1} # runs of each level (a level's 6th field overrides); medians are kept
if [ "${QUICK:-0}" = 1 ]; then
    LEVELS=${LEVELS:-"100:10:10:10:200"}
    STEADY_S=${STEADY_S_QUICK:-3}
else
    LEVELS=${LEVELS:-"100:10:10:10:1000:3 1000:100:10:10:5000:3 3000:300:10:10:10000:1 10000:1000:10:10:20000:1 ingest:8:1:5000:1:3"}
fi
J=${JIZHI:-$PWD/$BUILD/bin/jizhi} # JIZHI: another build of the controller, for an A/B
# FIXED_RESEND=1: the fake trials resend every 3 s instead of backing off (an A/B)
RIG="$PWD/$BUILD/bench/scale_rig"
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "${KEEP:-}" ]; then echo "kept $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT
port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mkdir -p "$(dirname "$OUT")"
echo "jizhi scale: levels $LEVELS; $USERS users; steady ${STEADY_S} s; $(nproc) CPUs (shared with the rig)" >&2

run_level() { # NAME DISPS SLOTS METRICS PERIOD RUN
    local name=$1 nd=$2 ns=$3 nm=$4 np=$5 d="$dir/$1.$6"
    mkdir -p "$d/home"
    export JIZHI_HOME="$d/home"
    "$J" keygen --name controller >/dev/null 2>&1
    "$RIG" --keys --disps "$nd" --users "$USERS" > "$d/home/authorized_keys"
    local ep="tcp://127.0.0.1:$(port)"
    "$J" controller --db "$d/s.db" --bind "$ep" 2>"$d/ctl.err" >/dev/null &
    local ctl=$!
    pids=($ctl)
    for _ in $(seq 100); do [ -s "$d/s.db.endpoint" ] && break; sleep 0.1; done
    "$J" serve --db "$d/s.db" --http 127.0.0.1:0 2>"$d/web.err" >/dev/null &
    pids+=($!)
    local url=""
    for _ in $(seq 100); do
        url=$(sed -n 's/.*web dashboard at \([^ ]*\).*/\1/p' "$d/web.err" 2>/dev/null | head -1)
        [ -n "$url" ] && break
        sleep 0.1
    done
    "$PYTHON" - "${url%/}" "$d/api.lat" "$d/api.stop" <<'PY' &
import sys, time, urllib.error, urllib.request, os
url, out, stop = sys.argv[1:4]
lat = []
errs = []
k = 0
while not os.path.exists(stop):
    path = "/api/studies" if k % 2 == 0 else "/api/studies/u0/trials?limit=1000"
    k += 1
    t = time.perf_counter()
    try:
        urllib.request.urlopen(url + path, timeout=30).read()
        lat.append((time.perf_counter() - t) * 1e3)
    except urllib.error.HTTPError as e:
        if e.code != 404:  # 404: the study is not submitted yet, not a failure
            lat.append(-1.0)
            errs.append(f"{path}: {e}")
    except Exception as e:
        lat.append(-1.0)
        errs.append(f"{path}: {e}")
    time.sleep(0.05)
open(out, "w").write("\n".join(f"{x:.3f}" for x in lat) + "\n")
open(out + ".err", "w").write("\n".join(errs[:5]) + "\n")
PY
    local reader=$!
    pids+=($reader)
    local procs=1
    [ "$((nd * ns))" -gt 3000 ] && procs=2
    "$RIG" --controller "$ep" --server-key "$(cat "$d/home/controller.pub")" \
        --disps "$nd" --slots "$ns" --metrics "$nm" --period-ms "$np" --users "$USERS" \
        --procs "$procs" --steady-s "$STEADY_S" --ctl-pid "$ctl" ${FIXED_RESEND:+--fixed-resend} \
        > "$d/rig.json" 2>"$d/rig.err" || true
    touch "$d/api.stop"
    wait "$reader" 2>/dev/null || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    unset JIZHI_HOME
    "$PYTHON" - "$name" "$d" <<'PY' >> "$dir/levels.jsonl"
import json, sys, sqlite3
name, d = sys.argv[1:3]
try:
    r = json.load(open(f"{d}/rig.json"))
except Exception as e:
    r = {"failed": f"rig: {e}: " + open(f"{d}/rig.err").read()[-500:]}
db = sqlite3.connect(f"{d}/s.db")
stored = db.execute("SELECT count(*) FROM metrics").fetchone()[0]
r["level"] = name
r["stored"] = stored
if "points_acked" in r:
    r["lost"] = max(0, r["points_acked"] - stored)
lat = sorted(float(x) for x in open(f"{d}/api.lat").read().split() if float(x) >= 0)
bad = sum(1 for x in open(f"{d}/api.lat").read().split() if float(x) < 0)
pct = lambda q: lat[int(q * (len(lat) - 1) + 0.5)] if lat else None
r["api_n"], r["api_failed"], r["api_p50_ms"], r["api_p99_ms"] = len(lat), bad, pct(0.5), pct(0.99)
if bad:
    r["api_errors"] = open(f"{d}/api.lat.err").read().strip().splitlines()[:3]
err = open(f"{d}/rig.err").read().strip().splitlines()
r["rig_log"] = err[-5:]
print(json.dumps(r))
PY
    tail -1 "$dir/levels.jsonl" >&2
}

# PRIOR: the levels.jsonl of an earlier run (KEEP=1) to add to this one's
if [ -n "${PRIOR:-}" ]; then cat "$PRIOR" > "$dir/levels.jsonl"; fi
for lv in $LEVELS; do
    IFS=: read -r name nd ns nm np reps <<< "$lv"
    for r in $(seq "${reps:-$REPEAT}"); do
        run_level "$name" "$nd" "$ns" "$nm" "$np" "$r"
        [ -n "${KEEP:-}" ] || rm -rf "${dir:?}/$name.$r"
    done
done

"$PYTHON" - "$dir/levels.jsonl" "$OUT" <<'PY'
import json, os, sys
import statistics
runs = [json.loads(l) for l in open(sys.argv[1])]
names = list(dict.fromkeys(r["level"] for r in runs))
levels = []
for n in names:  # the median of each number over the level's runs
    rs = [r for r in runs if r["level"] == n]
    m = dict(rs[-1])
    for k, v in rs[0].items():
        vals = [r.get(k) for r in rs]
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
            m[k] = statistics.median(vals) if k not in ("lost", "errors", "set_failed", "api_failed") else max(vals)
    m["runs"] = len(rs)
    if m.get("ctl_cpu_steady_frac", -1) > 0 and m.get("steady_s"):
        # messages per second the controller handled in the steady phase
        # (metric batches, dispatcher heartbeats, waited sets and their acks)
        msgs = (m["points_acked_steady"] / m["metrics"] + m["disps"] * m["steady_s"]
                + 2 * m["set_n"]) / m["steady_s"]
        m["ctl_msgs_per_s"] = round(msgs, 1)
        m["ctl_cpu_us_per_msg"] = round(m["ctl_cpu_steady_frac"] * 1e6 / msgs, 1)
    levels.append(m)
by = {l["level"]: l for l in levels}
def biggest(key):
    vals = [(l.get("running", 0), l[key]) for l in levels if l.get(key) is not None and l["level"] != "ingest"]
    return max(vals)[1] if vals else None
out = {
    # over the largest ramp (a ramp of 100 trials takes a few ms: no rate)
    "dispatch_per_s": biggest("dispatch_per_s"),
    "set_p99_ms": {k: by[k].get("set_p99_ms") for k in ("100", "1000", "10000") if k in by},
    "points_per_s": (by.get("ingest") or {}).get("points_per_s") or biggest("points_per_s"),
    "api_p99_ms": biggest("api_p99_ms"),
    "rss_mb": by["10000"].get("ctl_rss_mb") if "10000" in by else biggest("ctl_rss_mb"),
    "lost": sum(l.get("lost", 0) for l in levels),
    "ctl_cpu": {l["level"]: {"steady_frac": l.get("ctl_cpu_steady_frac"),
                             "us_per_msg": l.get("ctl_cpu_us_per_msg")} for l in levels},
    "load_avg": os.getloadavg(),
    "failed": [f"{l['level']}: {l.get('failed') or ''}{l.get('error_codes') or ''}"
               f"{' behind ' + str(l['behind']) if l.get('behind') else ''}"
               f"{' set failed ' + str(l['set_failed']) if l.get('set_failed') else ''}"
               f"{' running ' + str(l.get('running')) + ' of ' + str(l.get('disps', 0) * l.get('slots', 0)) if l.get('running', 0) < l.get('disps', 0) * l.get('slots', 0) else ''}"
               for l in levels],
    "levels": levels,
}
out["failed"] = [f for f in out["failed"] if not f.endswith(": ")]
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(json.dumps({k: v for k, v in out.items() if k != "levels"}, indent=1))
PY
