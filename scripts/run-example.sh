#!/usr/bin/env bash
# run-example.sh - what `make run` runs: the example study, from scratch.
# Uses the Fashion-MNIST study over jizhi-train when the trainer is built,
# else the Python objective (JIZHI_EXAMPLE=SPEC runs another). Ends with a
# short table: the trials by state and the five best.
# JIZHI_EXAMPLE_SHORT=N: the same study in a short mode (tests run it so):
# N trials, 2 at a time, and a jizhi-train command on 2000 training and 500
# validation examples for 2 epochs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNS=${JIZHI_RUNS:-runs} # where the example database goes
mkdir -p "$RUNS"
if [ -n "${JIZHI_EXAMPLE:-}" ]; then # another spec, for a quick look
    spec=$JIZHI_EXAMPLE
elif [ -x "$BUILD/bin/jizhi-train" ] && [ -f examples/fmnist.json ]; then
    spec=examples/fmnist.json
else
    spec=examples/python-objective.json
fi
if [ -n "${JIZHI_EXAMPLE_SHORT:-}" ]; then
    short=$RUNS/$(basename "$spec" .json)-short.json
    python3 - "$spec" "$JIZHI_EXAMPLE_SHORT" "$short" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["budget"].update({"trials": int(sys.argv[2]), "parallel": 2})
cmd = spec["trial"]["command"]
if cmd and cmd[0].endswith("jizhi-train"):  # later options win
    cmd += ["--train-subset", "2000", "--val-size", "500", "--epochs", "2"]
json.dump(spec, open(sys.argv[3], "w"), indent=1)
PY
    spec=$short
fi
db=$RUNS/example.db
rm -f "$db" "$db-wal" "$db-shm" "$db.endpoint"
echo "jizhi run $spec --db $db"
"$BUILD/bin/jizhi" run "$spec" --db "$db"
name=$(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$spec" | head -1)
echo
# A short table: the trials by state and the five best, from the JSON export.
"$BUILD/bin/jizhi" study export "$name" --db "$db" --format json | python3 -c '
import json, sys
from collections import Counter
spec = json.load(open(sys.argv[1]))
mode = spec.get("objective", {}).get("mode", "min")
trials = json.load(sys.stdin)
trials = trials.get("trials", trials) if isinstance(trials, dict) else trials
print("trials: " + ", ".join("%d %s" % (n, s) for s, n in sorted(Counter(t["state"] for t in trials).items())))
done = [t for t in trials if isinstance(t.get("value"), (int, float))]
done.sort(key=lambda t: t["value"], reverse=(mode == "max"))
if not done:
    sys.exit(0)
def fmt(v):
    return "%.4g" % v if isinstance(v, float) else str(v)
print("the best %d by %s (%s):" % (min(5, len(done)), spec["objective"].get("metric", "value"), mode))
print("%6s  %-10s  %8s  %s" % ("TRIAL", "STATE", "VALUE", "PARAMS"))
for t in done[:5]:
    ps = " ".join("%s=%s" % (k, fmt(v)) for k, v in sorted(t.get("params", {}).items()))
    print("%6d  %-10s  %8.4g  %s" % (t["id"], t["state"], t["value"], ps))
' "$spec"
echo
echo "every trial: $BUILD/bin/jizhi study show $name --db $db"
echo "as CSV:      $BUILD/bin/jizhi study export $name --db $db --format csv"
