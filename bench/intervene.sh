#!/usr/bin/env bash
# intervene.sh - `make bench-intervene`: latency of a live change, from the
# request to the trial's acknowledgement. TRIALS scripted trials
# (bench/intervene_trial: libjizhi, polling every BENCH_POLL_MS ms) run
# under `jizhi controller` + `jizhi dispatcher`; a C driver over ZeroMQ
# sends REQUESTS `trial set ID lr=...` requests round-robin (each waits
# for the acknowledgement) and prints median and p99; then a handful of
# real `jizhi trial set` commands are timed (process start included).
# No public tuning system changes a running trial's parameters from
# outside, so there is no peer to compare with; the goal is p99 <= 50 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
TRIALS=${TRIALS:-100}
REQUESTS=${REQUESTS:-1000}
CLI_RUNS=${CLI_RUNS:-10}
export BENCH_POLL_MS=${BENCH_POLL_MS:-2}
J="$PWD/$BUILD/bin/jizhi"
dir=$(mktemp -d)
pids=()
cleanup() {
    "$J" study stop intervene --db "$dir/b.db" >/dev/null 2>&1 || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
ep="ipc://$dir/ctl.sock"
cat > "$dir/spec.json" <<JSON
{"name": "intervene", "objective": {"metric": "score", "mode": "max"},
 "scheduler": {"type": "random", "seed": 1},
 "budget": {"trials": $TRIALS, "parallel": $TRIALS},
 "space": {"lr": {"type": "float", "low": 0.001, "high": 1.0, "log": true}},
 "trial": {"command": ["$PWD/$BUILD/bench/intervene_trial"], "timeout_s": 900, "retries": 0,
           "env": {"BENCH_POLL_MS": "$BENCH_POLL_MS", "BENCH_MAX_S": "600"}}}
JSON
"$J" controller --db "$dir/b.db" --bind "$ep" 2>"$dir/ctl.err" &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/b.db.endpoint" ] && break; sleep 0.1; done
"$J" dispatcher --controller "$ep" --slots "$TRIALS" --name bench --log-dir "$dir/logs" 2>"$dir/disp.err" &
pids+=($!)
"$J" study submit "$dir/spec.json" --db "$dir/b.db" >/dev/null
# wait until every trial runs and has reported (its helper is connected)
running_ids() {
    "$J" trial list intervene --db "$dir/b.db" --json |
        "$PYTHON" -c 'import json,sys; print(" ".join(str(t["id"]) for t in json.load(sys.stdin) if t["state"] == "running" and t["last_step"] >= 0))'
}
ids=""
for _ in $(seq 600); do
    ids=$(running_ids)
    [ "$(echo "$ids" | wc -w)" -ge "$TRIALS" ] && break
    sleep 0.2
done
n=$(echo "$ids" | wc -w)
if [ "$n" -lt "$TRIALS" ]; then
    echo "only $n of $TRIALS trials running and reporting after 120 s" >&2
    tail -5 "$dir/ctl.err" "$dir/disp.err" >&2
    exit 1
fi
echo "jizhi intervene: $TRIALS running trials polling every $BENCH_POLL_MS ms, $(nproc) CPUs"
# shellcheck disable=SC2086
seq_out=$("$BUILD/bench/intervene_driver" --controller "$ep" --requests "$REQUESTS" $ids)
echo "$seq_out"
echo "$seq_out" | sed -E 's/.*p99 ([0-9.]+) ms, max.*/\1/' |
    awk '{printf "goal p99 <= 50 ms: %s (%.2f ms)\n", ($1 <= 50 ? "met" : "NOT met"), $1}'
# shellcheck disable=SC2086
"$BUILD/bench/intervene_driver" --controller "$ep" --requests "$REQUESTS" --concurrency 10 $ids
# real commands: process start, endpoint lookup, request, acknowledgement
times=()
set -- $ids
for k in $(seq "$CLI_RUNS"); do
    id=$(eval echo "\${$(( (k - 1) % $# + 1 ))}")
    s=$(date +%s%N)
    "$J" trial set "$id" "lr=0.0$k" --db "$dir/b.db" >/dev/null
    e=$(date +%s%N)
    times+=($(( (e - s) / 1000 )))
done
printf '%s\n' "${times[@]}" | sort -n | awk -v n="$CLI_RUNS" '
    {t[NR] = $1} END {printf "jizhi trial set (the command, x%d): median %.2f ms, max %.2f ms\n", n, t[int((NR + 1) / 2)] / 1000, t[NR] / 1000}'
"$J" study events intervene --db "$dir/b.db" --json | "$PYTHON" -c '
import json, sys
ev = [e for e in json.load(sys.stdin) if e["kind"] == "instruction"]
ok = sum(1 for e in ev if e["applied"])
timed = sum(1 for e in ev if e["latency_s"] is not None)
print(f"events: {len(ev)} instructions recorded, {ok} applied, {timed} with a latency")'
