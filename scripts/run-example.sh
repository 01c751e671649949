#!/usr/bin/env bash
# run-example.sh - what `make run` runs: the example study, from scratch.
# Uses the Fashion-MNIST study over jizhi-train when the trainer is built,
# else the Python objective.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
mkdir -p runs
if [ -x "$BUILD/bin/jizhi-train" ] && [ -f examples/fmnist.json ]; then
    spec=examples/fmnist.json
else
    spec=examples/python-objective.json
fi
db=runs/example.db
rm -f "$db" "$db-wal" "$db-shm" "$db.endpoint"
echo "jizhi run $spec --db $db"
"$BUILD/bin/jizhi" run "$spec" --db "$db"
name=$(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$spec" | head -1)
echo
echo "all trials: $BUILD/bin/jizhi study export $name --db $db --format csv"
"$BUILD/bin/jizhi" study export "$name" --db "$db" --format csv | head -40
