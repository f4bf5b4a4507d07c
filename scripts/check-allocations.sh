#!/usr/bin/env bash
# Allocation thresholds (CI): runs the Allocations package-benchmark suite — a V4L2 capture on the
# fake device through the exposure and focus stages with control requests flowing — and checks
# its mallocCountTotal against the stored static thresholds (Benchmarks/Thresholds/, 0 in the
# measured steady state; tolerance 0, set in Benchmarks/Benchmarks/Allocations/Allocations.swift).
# Exits non-zero when a threshold is breached (package-benchmark exits 2 on a regression).
set -euo pipefail
cd "$(dirname "$0")/../Benchmarks"
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
# A file added to the main package can leave a stale file list in the sub-package's release build.
rm -f .build/release.yaml .build/release/description.json
set +e
flock "$LOCK" swift package benchmark thresholds check --target Allocations --no-progress
rc=$?
set -e
if [ "$rc" != 0 ]; then
    echo "check-allocations: allocation threshold breached or benchmark failed (exit $rc)" >&2
    exit 1
fi
echo "check-allocations: 0 allocations per frame in steady state (threshold held)" >&2
