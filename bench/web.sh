#!/usr/bin/env bash
# web.sh - `make bench-web`: the web dashboard's two numbers, same run.
#   1. API latency of the study-page data (GET /api/studies/NAME/page, the
#      one request the study page makes) for 1000 trials x 10 000 points:
#      the first request (curves read from SQLite) and p50/p99 of the next
#      ones, against a peer that answers each request from SQLite without
#      the server's curve cache (the same downsampling in one SQL GROUP BY).
#      Goal: p99 <= 50 ms.
#   2. Time until the study page has drawn in headless Chromium (from
#      navigation start to the page's own "drawn" mark). Goal <= 1 s.
# The database is generated once under $BUILD/bench-web/ (about 10^7 rows)
# and reused. WEB_TRIALS / WEB_POINTS / WEB_REQUESTS change the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
exec "$PYTHON" bench/web_bench.py --jizhi "$PWD/$BUILD/bin/jizhi" --dir "$PWD/$BUILD/bench-web" \
    --trials "${WEB_TRIALS:-1000}" --points "${WEB_POINTS:-10000}" \
    --requests "${WEB_REQUESTS:-200}"
