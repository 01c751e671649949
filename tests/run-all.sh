#!/usr/bin/env bash
# run-all.sh - runs every test and prints one closing line that counts each
# distinct test once: "N passed, N failed, N skipped".
#
#   unit tests:        $BUILD/tests/test_*  (each TEST() is one test)
#   sanitizer pass:    build-san/tests/test_* again under ASan/UBSan; its
#                      result is its own line, not added to the count (the
#                      same tests), and any failure there fails the run
#   tsan pass:         build-tsan/tests/test_* (the threaded unit tests,
#                      Makefile's TSAN_TESTS) under ThreadSanitizer, counted
#                      like the sanitizer pass (tests/tsan.supp: libzmq only)
#   integration tests: tests/integration/test_*.py with pytest
#   integration under ASan/UBSan: a few of them again (SAN_INTEGRATION:
#                      controller, dispatcher, `jizhi report`'s helper, web
#                      server) with the daemons and CLI from build-san/bin;
#                      any sanitizer report fails it; counted like the
#                      sanitizer pass
#   fuzz targets:      build-fuzz/fuzz_* run for FUZZ_SECONDS (default 3)
#                      each from their seeds; one test per target
#   cudaemu:           tests/cudaemu/test_cudaemu.py with pytest (the CUDA
#                      trainer's code on the CPU emulation of the CUDA
#                      APIs, `make cudaemu`), beside the sanitizer passes
#
# --unit-only runs the unit tests only. A test that cannot run here (no
# clang for the fuzz targets, no GPU, ...) is counted as skipped with its
# reason, never as passed.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
FUZZ_SECONDS=${FUZZ_SECONDS:-3}
passed=0; failed=0; skipped=0; failures=(); skips=()
san_passed=0; san_failed=0

# Reads a "P passed, F failed[, S skipped]" line from file $2 (exit status
# $3) into the totals named by $4 ("main" or "san"); $1 labels failures.
count() {
    local line p f s
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$2" | tail -1)
    if [ -z "$line" ]; then
        [ "$4" = san ] && san_failed=$((san_failed + 1)) || failed=$((failed + 1))
        failures+=("$1 (no result line, exit $3)"); return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+'); s=${s:-0}
    # a binary that dies after its last test still fails
    [ "$f" -eq 0 ] && [ "$3" -ne 0 ] && f=1
    if [ "$4" = san ]; then
        san_passed=$((san_passed + p)); san_failed=$((san_failed + f))
    else
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
        while IFS= read -r l; do skips+=("$l"); done < <(grep -E '^SKIP ' "$2" | sed "s/^SKIP /$1: /")
    fi
    [ "$f" -gt 0 ] && failures+=("$1")
}

# Unit tests run under OMP_WAIT_POLICY=passive unless it is set, as
# jizhi-train runs itself (trainer/main.c): the trainer library's oneDNN
# linears and convolutions are OpenMP, and with libgomp's default an idle
# thread spins through the serial work between parallel regions.
# test_trn_train took 13-64 s under the default on the shared 2-core VM
# (the same binary, one run to the next, with the machine's load) and
# 2.8-3.6 s passive.
run_unit() { # $1 = build dir, $2 = label suffix, $3 = totals (main|san)
    for t in "$1"/tests/test_*; do
        [ -x "$t" ] || continue
        local out; out=$(mktemp)
        OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} timeout 600 "$t" >"$out" 2>&1; local rc=$?
        echo "  $(basename "$t")$2: $(grep -E '^[0-9]+ passed' "$out" | tail -1)"
        [ $rc -ne 0 ] && grep -E '^FAIL|ERROR|runtime error|Sanitizer' "$out" | head -20
        count "$(basename "$t")$2" "$out" $rc "$3"
        rm -f "$out"
    done
}

echo "== unit tests"
run_unit "$BUILD" "" main
if [ "${1:-}" != "--unit-only" ]; then
    # The CUDA code on cudaemu (tests/cudaemu/test_cudaemu.py): on one core
    # beside the sanitizer passes (which mostly wait), done before the
    # integration tests start; its output is shown after the fuzz targets
    emu_out=$(mktemp)
    JIZHI_BUILD="$PWD/$BUILD" timeout 900 "$PYTHON" -m pytest -q -rs -p no:cacheprovider \
        tests/cudaemu >"$emu_out" 2>&1 &
    emu_pid=$!
    if [ -d build-san/tests ]; then
        echo "== sanitizer pass: the same unit tests under AddressSanitizer/UBSan"
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
            run_unit build-san " [asan]" san
    else
        skips+=("sanitizer pass: build-san/ not built (make test builds it)")
    fi
    if [ -d build-tsan/tests ]; then
        echo "== ThreadSanitizer pass: the threaded unit tests"
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
            run_unit build-tsan " [tsan]" san
    else
        skips+=("ThreadSanitizer pass: build-tsan/ not built (make test builds it)")
    fi

    wait "$emu_pid"; emu_rc=$?

    echo "== integration tests"
    out=$(mktemp)
    JIZHI_BUILD="$PWD/$BUILD" timeout 1800 "$PYTHON" -m pytest -q -rs -p no:cacheprovider \
        tests/integration 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$out" | tail -1)
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); p=${p:-0}
    f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+'); f=${f:-0}
    e=$(echo "$line" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+'); e=${e:-0}
    s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+'); s=${s:-0}
    passed=$((passed + p)); failed=$((failed + f + e)); skipped=$((skipped + s))
    while IFS= read -r l; do skips+=("pytest: ${l#SKIPPED }"); done < <(grep -E '^SKIPPED ' "$out")
    [ $((f + e)) -gt 0 ] && failures+=("pytest ($f failed, $e errors)")
    if [ "$rc" -ne 0 ] && [ $((f + e)) -eq 0 ]; then failed=$((failed + 1)); failures+=("pytest (exit $rc)"); fi
    rm -f "$out"

    # A representative few integration tests with the daemons built with
    # ASan/UBSan (Python trials load the plain libjizhi: JIZHI_HELPER_LIB).
    # Tests that run jizhi-train or inspect the library are left to the
    # main pass (the trainer under ASan is slow; the library check reads
    # its symbols).
    SAN_INTEGRATION=${SAN_INTEGRATION:-"tests/integration/test_control.py tests/integration/test_recovery.py tests/integration/test_web_api.py"}
    SAN_DESELECT="--deselect tests/integration/test_control.py::test_libjizhi_exports_only_jz_symbols_and_builds_with_pkg_config
        --deselect tests/integration/test_control.py::test_pause_release_frees_the_slot_and_resume_restarts_from_the_checkpoint
        --deselect tests/integration/test_web_api.py::test_pause_release_and_resume_through_the_api"
    if [ -x build-san/bin/jizhi ] && [ -x build-san/bin/jizhi-core ]; then
        echo "== integration under ASan/UBSan: $SAN_INTEGRATION"
        sanlogs=$(mktemp -d)
        out=$(mktemp)
        # shellcheck disable=SC2086
        ASAN_OPTIONS="detect_leaks=1:log_path=$sanlogs/asan" \
            UBSAN_OPTIONS="print_stacktrace=1:log_path=$sanlogs/ubsan" \
            JIZHI_BUILD="$PWD/build-san" JIZHI_HELPER_LIB="$PWD/$BUILD/lib/libjizhi.so" \
            timeout 600 "$PYTHON" -m pytest -q -rs -p no:cacheprovider $SAN_INTEGRATION \
            $SAN_DESELECT >"$out" 2>&1
        rc=$?
        tail -3 "$out"
        line=$(grep -E '[0-9]+ (passed|failed|error)' "$out" | tail -1)
        p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); p=${p:-0}
        f=$(echo "$line" | grep -oE '[0-9]+ (failed|error)' | awk '{s += $1} END {print s + 0}')
        f=${f:-0}
        [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
        if ls "$sanlogs"/* >/dev/null 2>&1; then # a sanitizer report, whatever pytest saw
            head -60 "$sanlogs"/*
            f=$((f + 1))
        fi
        san_passed=$((san_passed + p)); san_failed=$((san_failed + f))
        [ "$f" -gt 0 ] && failures+=("integration under ASan/UBSan ($f; reports above)")
        rm -rf "$sanlogs" "$out"
    else
        skips+=("integration under ASan/UBSan: build-san/bin/jizhi or jizhi-core not built (make test builds both)")
    fi

    echo "== fuzz targets (${FUZZ_SECONDS} s each)"
    names=$(ls tests/fuzz/*.c 2>/dev/null | sed -E 's|tests/fuzz/(.*)\.c|\1|')
    for n in $names; do
        if [ ! -x "build-fuzz/$n" ]; then
            skipped=$((skipped + 1)); skips+=("fuzz $n: not built (needs clang: make fuzz-build)")
            echo "  $n: SKIPPED (not built)"; continue
        fi
        if make --no-print-directory FUZZ_SECONDS="$FUZZ_SECONDS" "fuzz-run-$n" >/dev/null 2>&1; then
            passed=$((passed + 1))
            echo "  $n: ok ($(grep -E '^stat::number_of_executed_units' "build-fuzz/$n.log" | grep -oE '[0-9]+$') inputs)"
        else
            failed=$((failed + 1)); failures+=("fuzz $n (build-fuzz/$n.log)")
            echo "  $n: FAILED"; tail -20 "build-fuzz/$n.log"
        fi
    done

    echo "== the CUDA code on cudaemu, the CPU emulation of the CUDA APIs (tests/cudaemu; ran beside the sanitizer passes)"
    cat "$emu_out"
    rc=$emu_rc
    line=$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$emu_out" | tail -1)
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); p=${p:-0}
    f=$(echo "$line" | grep -oE '[0-9]+ (failed|error)' | awk '{s += $1} END {print s + 0}')
    s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+'); s=${s:-0}
    [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ] && f=1
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    while IFS= read -r l; do skips+=("cudaemu: ${l#SKIPPED }"); done < <(grep -E '^SKIPPED ' "$emu_out")
    [ "$f" -gt 0 ] && failures+=("cudaemu ($f failed)")
    rm -f "$emu_out"
fi

echo
[ ${#skips[@]} -gt 0 ] && printf 'skipped: %s\n' "${skips[@]}"
[ ${#failures[@]} -gt 0 ] && printf 'failed: %s\n' "${failures[@]}"
if [ "${1:-}" != "--unit-only" ] && { [ -d build-san/tests ] || [ -d build-tsan/tests ]; }; then
    echo "sanitizer passes (ASan/UBSan and TSan: unit tests and a few integration tests again, not counted below): $san_passed passed, $san_failed failed"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$san_failed" -eq 0 ]
