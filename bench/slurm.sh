#!/usr/bin/env bash
# slurm.sh - `make bench-slurm`: what running a trial through Slurm costs.
# Measured per trial from the controller's start decision (trials.started)
# to its first report reaching the controller (the first metrics.time of the
# attempt), both stamped by the controller. Two studies of TRIALS one-report
# trials (bench/slurm_trial, libjizhi), one at a time, in the same run: one
# through `jizhi dispatcher` (local fork/exec), one through `jizhi dispatcher
# --backend slurm` on a one-node Slurm cluster on localhost
# (tests/slurm/cluster.sh). Prints median and p90 of each and the ratio.
# Where Slurm cannot start it says SKIPPED and why.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
TRIALS=${TRIALS:-20}
POLL_S=${POLL_S:-1}
J="$PWD/$BUILD/bin/jizhi"
TRIAL="$PWD/$BUILD/bench/slurm_trial"
dir=$(mktemp -d /tmp/jizhi-bench-slurm.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    tests/slurm/cluster.sh down "$dir/cluster" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT

if ! out=$(tests/slurm/cluster.sh up "$dir/cluster" 2>&1); then
    echo "bench-slurm: SKIPPED: Slurm cannot start here: $out"
    exit 0
fi
export "${out##*$'\n'}" # SLURM_CONF=...

port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run_study NAME DISPATCHER-ARGS...: a controller of its own, one dispatcher
run_study() {
    local name=$1
    shift
    local ep="tcp://127.0.0.1:$(port)" db="$dir/$name.db"
    cat > "$dir/$name.json" <<JSON
{"name": "$name", "objective": {"metric": "score", "mode": "max"},
 "scheduler": {"type": "random", "seed": 1},
 "budget": {"trials": $TRIALS, "parallel": 1},
 "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
 "trial": {"command": ["$TRIAL"], "timeout_s": 120, "retries": 0}}
JSON
    "$J" controller --db "$db" --bind "$ep" --insecure --log "$dir/$name.ctl.log" &
    local ctl=$!
    pids+=("$ctl")
    for _ in $(seq 100); do [ -s "$db.endpoint" ] && break; sleep 0.1; done
    "$J" dispatcher --controller "$ep" --insecure --name "$name" --log-dir "$dir/logs" \
        --log "$dir/$name.disp.log" "$@" &
    local disp=$!
    pids+=("$disp")
    "$J" study submit "$dir/$name.json" --db "$db" --insecure >/dev/null
    local state=""
    for _ in $(seq 1200); do
        state=$(sqlite3 "$db" "SELECT state FROM studies WHERE name='$name'")
        [ "$state" = finished ] && break
        sleep 0.25
    done
    kill "$disp" "$ctl" 2>/dev/null || true
    wait "$disp" "$ctl" 2>/dev/null || true
    if [ "$state" != finished ]; then
        echo "bench-slurm: study $name did not finish (state '$state'); logs in $dir" >&2
        trap - EXIT
        exit 1
    fi
}

run_study local --slots 1
run_study slurm --backend slurm --max-jobs 1 --poll-s "$POLL_S"

"$PYTHON" - "$dir" "$TRIALS" "$POLL_S" <<'PY'
import sqlite3, statistics, sys
d, n, poll = sys.argv[1], int(sys.argv[2]), sys.argv[3]
res = {}
for name in ("local", "slurm"):
    con = sqlite3.connect(f"{d}/{name}.db")
    rows = con.execute(
        "SELECT t.state, MIN(m.time) - t.started FROM trials t "
        "LEFT JOIN metrics m ON m.trial_id = t.id AND m.attempt = t.attempt "
        "GROUP BY t.id").fetchall()
    lat = sorted(r[1] for r in rows if r[0] == "completed" and r[1] is not None)
    if len(lat) != n:
        sys.exit(f"bench-slurm: {name}: {len(lat)} of {n} trials completed with a report")
    res[name] = (statistics.median(lat), lat[int(0.9 * (len(lat) - 1))])
print(f"start decision -> first report, {n} trials one at a time (Slurm poll {poll} s; "
      "one-node test cluster, SchedulerParameters=batch_sched_delay=0):")
for name, (med, p90) in res.items():
    print(f"  {name:6s} median {med * 1000:8.1f} ms   p90 {p90 * 1000:8.1f} ms")
print(f"  slurm/local ratio: median {res['slurm'][0] / res['local'][0]:.1f}x, "
      f"p90 {res['slurm'][1] / res['local'][1]:.1f}x")
PY
