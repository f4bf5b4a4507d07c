#!/usr/bin/env bash
# Frames cannot be misused from outside the package: code that imports the public modules cannot
# retain, release or recycle a frame, nor take one from a pool without a lease. Type-checks small
# files against the built modules (as a user's package sees them: without this package's name, so
# `package` declarations are out of reach) and expects each misuse to be refused as inaccessible,
# and the sanctioned ways (leases, sample buffers, nextSample, StageChain.submit) to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
flock "$LOCK" swift build --target ViewfinderKit >/dev/null
MODULES=.build/debug/Modules
[ -d "$MODULES" ] || MODULES=.build/debug
# Every C target of the package, found rather than listed (a new C target once failed this check
# with "missing required module"): system-library targets by their directory (module.modulemap in
# Sources/<name>), source targets by the module map SwiftPM generated in the build directory.
FLAGS=(-typecheck -I "$MODULES")
for dir in Sources/C*/; do
    [ -f "$dir/module.modulemap" ] && FLAGS+=(-I "${dir%/}")
done
for map in .build/debug/C*.build/module.modulemap; do
    FLAGS+=(-Xcc "-fmodule-map-file=$map")
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

misuses=(
    "frame.release()"
    "frame.retain()"
    "_ = frame.referenceCount"
    "_ = pool.acquire()"
    "pool.recycle(frame)"
    "camera.recycle(frame)"
    "_ = Frame(capacity: 16, format: frame.format, recycler: pool)"
)
failed=0
for m in "${misuses[@]}"; do
    cat > "$tmp/misuse.swift" <<SWIFT
import ViewfinderKit
func misuse(_ frame: Frame, _ pool: FramePool, _ camera: V4L2Camera) {
    $m
}
SWIFT
    if out=$(flock "$LOCK" swiftc "${FLAGS[@]}" "$tmp/misuse.swift" 2>&1); then
        echo "check-frame-api: '$m' compiles outside the package" >&2; failed=1
    elif ! grep -q -E "inaccessible due to 'package' protection level|extra argument 'recycler'" <<<"$out"; then
        echo "check-frame-api: '$m' fails for another reason:" >&2; echo "$out" | head -5 >&2; failed=1
    fi
done

cat > "$tmp/use.swift" <<'SWIFT'
import ViewfinderKit
func use(_ frame: Frame, _ pool: FramePool, _ source: any CaptureSource, _ chain: StageChain) throws -> [SampleBuffer] {
    var kept: [SampleBuffer] = []
    if let lease = pool.lease() { kept.append(lease.share()); chain.submit(lease.frame) }
    if let b = SampleBuffer(retaining: frame) { kept.append(b) }
    if case .sample(let s) = try source.nextSample(timeoutNanoseconds: 0) { kept.append(s) }
    return kept
}
SWIFT
if ! out=$(flock "$LOCK" swiftc "${FLAGS[@]}" "$tmp/use.swift" 2>&1); then
    echo "check-frame-api: the public ways to hold frames do not compile:" >&2; echo "$out" >&2; failed=1
fi
[ "$failed" = 0 ] && echo "check-frame-api: ${#misuses[@]} misuses refused by the compiler; leases, sample buffers and nextSample compile" >&2
exit "$failed"
