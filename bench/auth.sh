#!/usr/bin/env bash
# auth.sh - `make bench-auth`: what CURVE costs. The same two measurements
# against `jizhi controller` on tcp://127.0.0.1, once with CURVE (keys,
# authorized_keys, a dispatcher key; trials get the server key) and once
# with --insecure plain TCP, in the same run:
#   - ingest: TRIALS trials report POINTS metric points each through
#     libjizhi; points persisted per second from the first report to the
#     last acknowledgement (bench/ingest_trial);
#   - trial set: REQUESTS `trial set` requests from a C driver to
#     SET_TRIALS running trials, each waited for until the trial
#     acknowledges it; median and p99 (bench/intervene_driver).
# The two modes alternate ROUNDS times (the machine's load changes under
# both alike); each mode's best round is compared. Then the ratios
# CURVE/plain. Goal: CURVE at most 10 % slower.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
TRIALS=${TRIALS:-4}
POINTS=${POINTS:-200000}
SET_TRIALS=${SET_TRIALS:-20}
REQUESTS=${REQUESTS:-1000}
ROUNDS=${ROUNDS:-2}
J="$PWD/$BUILD/bin/jizhi"
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run MODE ROUND: writes "ingest RATE" and the driver's line to
# $dir/MODE.ROUND.out; stops its daemons before it returns
run() {
    local mode=$1 d="$dir/$1.$2" out="$dir/$1.$2.out"
    mkdir -p "$d/home"
    local ep="tcp://127.0.0.1:$(port)" extra=() dkey=()
    export JIZHI_HOME="$d/home"
    if [ "$mode" = curve ]; then
        "$J" keygen --name controller >/dev/null 2>&1
        local admin disp
        admin=$("$J" keygen 2>/dev/null)
        disp=$("$J" keygen --name disp 2>/dev/null)
        printf '%s bench admin\n%s m1 dispatcher\n' "$admin" "$disp" > "$d/home/authorized_keys"
        dkey=(--key "$d/home/disp.key")
        export JIZHI_SERVER_KEY="$d/home/controller.pub"
    else
        extra=(--insecure)
        export JIZHI_SERVER_KEY=none
    fi
    "$J" controller --db "$d/b.db" --bind "$ep" "${extra[@]}" >/dev/null 2>"$d/ctl.err" &
    pids=($!)
    for _ in $(seq 100); do [ -s "$d/b.db.endpoint" ] && break; sleep 0.1; done
    "$J" dispatcher --controller "$ep" --slots $((TRIALS + SET_TRIALS)) --name m1 \
        --log-dir "$d/logs" "${dkey[@]}" >/dev/null 2>"$d/disp.err" &
    pids+=($!)
    cat > "$d/ingest.json" <<JSON
{"name": "ingest", "objective": {"metric": "score", "mode": "min"},
 "budget": {"trials": $TRIALS, "parallel": $TRIALS}, "space": {},
 "trial": {"command": ["$PWD/$BUILD/bench/ingest_trial", "--points", "$POINTS"],
           "env": {"BENCH_LOG": "$d/times.log"}}}
JSON
    "$J" study submit "$d/ingest.json" --controller "$ep" >/dev/null
    for _ in $(seq 1200); do
        [ -f "$d/times.log" ] && [ "$(wc -l < "$d/times.log")" -ge "$TRIALS" ] && break
        sleep 0.1
    done
    awk 'NR==1{s=$1;e=$2} {if($1<s)s=$1; if($2>e)e=$2; n+=$3} END{printf "ingest %.0f\n", n/(e-s)}' "$d/times.log" > "$out"
    cat > "$d/set.json" <<JSON
{"name": "set", "objective": {"metric": "score", "mode": "max"},
 "scheduler": {"type": "random", "seed": 1},
 "budget": {"trials": $SET_TRIALS, "parallel": $SET_TRIALS},
 "space": {"lr": {"type": "float", "low": 0.001, "high": 1.0, "log": true}},
 "trial": {"command": ["$PWD/$BUILD/bench/intervene_trial"], "timeout_s": 900, "retries": 0,
           "env": {"BENCH_POLL_MS": "2", "BENCH_MAX_S": "300"}}}
JSON
    "$J" study submit "$d/set.json" --controller "$ep" >/dev/null
    local ids=""
    for _ in $(seq 600); do
        ids=$("$J" trial list set --db "$d/b.db" --json | "$PYTHON" -c 'import json,sys; print(" ".join(str(t["id"]) for t in json.load(sys.stdin) if t["state"] == "running" and t["last_step"] >= 0))')
        [ "$(echo "$ids" | wc -w)" -ge "$SET_TRIALS" ] && break
        sleep 0.2
    done
    # shellcheck disable=SC2086
    "$BUILD/bench/intervene_driver" --controller "$ep" --requests "$REQUESTS" $ids >> "$out"
    "$J" study stop set --controller "$ep" >/dev/null 2>&1 || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    unset JIZHI_HOME JIZHI_SERVER_KEY
}

echo "jizhi auth: CURVE vs --insecure plain TCP on 127.0.0.1, $(nproc) CPUs;" \
     "ingest $TRIALS x $POINTS points, trial set x $REQUESTS to $SET_TRIALS trials"
for r in $(seq "$ROUNDS"); do
    run curve "$r"
    run plain "$r"
done
# best round of a mode: "RATE P99 LINE"
best() {
    for f in "$dir/$1".*.out; do
        rate=$(sed -n 's/^ingest //p' "$f")
        line=$(grep -v '^ingest' "$f")
        p99=$(echo "$line" | sed -E 's/.*p99 ([0-9.]+) ms, max.*/\1/')
        echo "$rate $p99 $line"
    done
}
for m in curve plain; do
    best "$m" | while read -r rate p99 line; do echo "  $m: ingest $rate points/s; $line"; done
done
ci=$(best curve | sort -k1,1nr | head -1 | cut -d' ' -f1)
pi=$(best plain | sort -k1,1nr | head -1 | cut -d' ' -f1)
cp=$(best curve | sort -k2,2n | head -1 | cut -d' ' -f2)
pp=$(best plain | sort -k2,2n | head -1 | cut -d' ' -f2)
echo "best of $ROUNDS: CURVE ingest $ci points/s, trial set p99 $cp ms; plain ingest $pi points/s, trial set p99 $pp ms"
awk -v ci="$ci" -v pi="$pi" -v cp="$cp" -v pp="$pp" 'BEGIN {
    printf "ratio CURVE/plain: ingest %.3f (points/s), trial set p99 %.3f (ms)\n", ci / pi, cp / pp
    ok = ci >= 0.9 * pi && cp <= 1.1 * pp
    printf "goal CURVE at most 10%% slower: %s\n", ok ? "met" : "NOT met" }'
