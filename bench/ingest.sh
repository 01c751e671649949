#!/usr/bin/env bash
# ingest.sh - metric points persisted per second: TRIALS simulated trial
# processes report POINTS points each through libjizhi into `jizhi run`
# (controller + SQLite); the rate is all points over the time from the
# first report to the last acknowledgement. Then Optuna's SQLite
# trial.report rate, if Optuna is installed, and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
TRIALS=${TRIALS:-8}
POINTS=${POINTS:-250000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/ingest.json" <<JSON
{"name": "ingest", "objective": {"metric": "score", "mode": "min"},
 "budget": {"trials": $TRIALS, "parallel": $TRIALS}, "space": {},
 "trial": {"command": ["$PWD/$BUILD/bench/ingest_trial", "--points", "$POINTS"],
           "env": {"BENCH_LOG": "$dir/times.log"}}}
JSON
"$BUILD/bin/jizhi" run "$dir/ingest.json" --db "$dir/ingest.db" --slots "$TRIALS" >/dev/null 2>"$dir/run.err" || {
    cat "$dir/run.err"; exit 1; }
stored=$(sqlite3 "$dir/ingest.db" "SELECT COUNT(*) FROM metrics")
rate=$(awk 'NR==1{s=$1;e=$2} {if($1<s)s=$1; if($2>e)e=$2; n+=$3} END{printf "%.0f", n/(e-s)}' "$dir/times.log")
echo "jizhi ingest: $TRIALS trials x $POINTS points, $stored stored, $rate points/s persisted"
if out=$("$PYTHON" bench/ingest_optuna.py 3000) && echo "$out" | grep -q "points/s"; then
    echo "$out"
    orate=$(echo "$out" | sed -E 's/.*= ([0-9]+) points\/s.*/\1/')
    awk -v a="$rate" -v b="$orate" 'BEGIN{printf "ratio jizhi/optuna: %.0fx\n", a/b}'
else
    echo "$out"
fi
