#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer) of every parser of outside input: builds the targets of the
# Fuzz/ sub-package with AddressSanitizer and coverage instrumentation over the whole package,
# makes each target's seed corpus with the package's own writers, runs each target for N seconds
# and prints one line per target:
#
#   target NAME: ok, RUNS runs
#   target NAME: CRASH (reproducer: PATH) ...
#
# Exit 0 only if every target is clean.
#
#   bash scripts/fuzz.sh [--seconds N] [--runs N] [--no-build] [TARGET ...]
#
# --runs N stops each target after N executions instead of after N seconds (the long run:
# --runs 1000000). Work corpora grow in Fuzz/Corpus-work/NAME (not in git); crashes and their
# reproducers are written to Fuzz/Crashes/NAME/. Reproduce one with
#   Fuzz/.build/debug/NAME Fuzz/Crashes/NAME/crash-…
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
SECONDS_PER_TARGET=20
RUNS=""
BUILD=1
TARGETS=()
ALL=(FuzzY4M FuzzDump FuzzMJPEG FuzzPipeline FuzzMetadata FuzzAudio)
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_PER_TARGET=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n 2,20p "$0"; exit 0 ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")

# Leaks in Foundation's caches (NSRegularExpression in the stage-registry generator, a build
# tool) are not ours; the build tools run instrumented too.
export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}"
# Swift's own crash backtracer reads the crashed process's memory and trips ASan; libFuzzer and
# ASan print the stack themselves.
export SWIFT_BACKTRACE=enable=no
BIN=Fuzz/.build/debug
if [ "$BUILD" = 1 ]; then
    # Every Swift module is built with ASan and libFuzzer's coverage (inline 8-bit counters, PC
    # table, comparison tracing: what -sanitize=fuzzer turns on); only the fuzz executables link
    # libFuzzer (their unsafe flags in Fuzz/Package.swift), so build tools keep their own main.
    # ld.gold fails on these objects (internal error in format_file_lineno): lld links them.
    flags=(-c debug -Xswiftc -sanitize=address -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp -Xswiftc -use-ld=lld)
    rm -f "${TARGETS[@]/#/$BIN/}"
    flock "$LOCK" swift build --package-path Fuzz "${flags[@]}" 2>&1 | grep -E "error" | grep -v "Cannot export" >&2 || true
    for t in "${TARGETS[@]}"; do
        [ -x "$BIN/$t" ] || { echo "target $t: BUILD FAILED" >&2; exit 1; }
    done
fi

status=0
for t in "${TARGETS[@]}"; do
    corpus=Fuzz/Corpus-work/$t
    crashes=Fuzz/Crashes/$t
    mkdir -p "$corpus" "$crashes"
    "$BIN/$t" --make-seeds "$corpus"
    [ -d "Fuzz/Corpus/$t" ] && cp -n Fuzz/Corpus/$t/* "$corpus"/ 2>/dev/null || true
    log=$(mktemp)
    limit=(-max_total_time="$SECONDS_PER_TARGET")
    [ -n "$RUNS" ] && limit=(-runs="$RUNS")
    # -rss_limit_mb/-malloc_limit_mb: a parser that believes a header asking for gigabytes is a
    # finding (an out-of-memory crash), as it would be on a camera box.
    set +e
    "$BIN/$t" "${limit[@]}" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1
    rc=$?
    set -e
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    if [ $rc -eq 0 ]; then
        echo "target $t: ok, $runs runs"
    else
        status=1
        repro=$(grep -o "Test unit written to [^ ]*" "$log" | tail -1 | sed 's/Test unit written to //' || true)
        echo "target $t: CRASH after $runs runs (reproducer: ${repro:-none}, log: $log)"
        { grep -E "ERROR|Fatal error|SUMMARY|#[0-9] " "$log" || tail -5 "$log"; } | head -12 | sed 's/^/    /' || true
        continue
    fi
    rm -f "$log"
done
exit $status
