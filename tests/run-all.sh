#!/usr/bin/env bash
# run-all.sh - runs every test and prints one closing "N passed, N failed".
#   unit tests:        $BUILD/tests/test_*   (and build-san/tests/test_* under ASan/UBSan)
#   integration tests: tests/integration/test_*.py with pytest
# --unit-only skips the sanitizer pass and the integration tests.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
passed=0; failed=0; failures=()

count() { # $1 = label, $2 = output file, $3 = exit status
    local line p f
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$2" | tail -1)
    if [ -z "$line" ]; then
        failed=$((failed + 1)); failures+=("$1 (no result line, exit $3)"); return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -gt 0 ] || [ "$3" -ne 0 ]; then
        failures+=("$1"); [ "$f" -eq 0 ] && failed=$((failed + 1))
    fi
}

run_unit() { # $1 = build dir, $2 = label suffix
    for t in "$1"/tests/test_*; do
        [ -x "$t" ] || continue
        local out; out=$(mktemp)
        timeout 600 "$t" >"$out" 2>&1; local rc=$?
        echo "  $(basename "$t")$2: $(grep -E '^[0-9]+ passed' "$out" | tail -1)"
        [ $rc -ne 0 ] && grep -E '^FAIL|ERROR|runtime error|Sanitizer' "$out" | head -20
        count "$(basename "$t")$2" "$out" $rc
        rm -f "$out"
    done
}

echo "== unit tests"
run_unit "$BUILD" ""
if [ "${1:-}" != "--unit-only" ]; then
    if [ -d build-san/tests ]; then
        echo "== unit tests under AddressSanitizer/UBSan"
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 run_unit build-san " [asan]"
    fi
    echo "== integration tests"
    out=$(mktemp)
    JIZHI_BUILD="$PWD/$BUILD" timeout 1800 "$PYTHON" -m pytest -q -p no:cacheprovider tests/integration 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '[0-9]+ (passed|failed)' "$out" | tail -1)
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); p=${p:-0}
    f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+'); f=${f:-0}
    e=$(echo "$line" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+'); e=${e:-0}
    passed=$((passed + p)); failed=$((failed + f + e))
    if [ "$rc" -ne 0 ] && [ $((f + e)) -eq 0 ]; then failed=$((failed + 1)); failures+=("pytest (exit $rc)"); fi
    rm -f "$out"
fi

echo
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
