#!/usr/bin/env bash
# Packaging test: Viewfinder used the way a Swift developer depends on a library, by a versioned URL.
#
# Clones the committed HEAD of this repository into a temporary folder, tags the clone 1.0.0, copies
# Examples/CustomStage (from the clone) to a temporary consumer package whose dependency line is
# rewritten from `.package(path: "../..")` to `.package(url: "file://<clone>", from: "1.0.0")`, builds
# it and runs the user's stage by name. SwiftPM refuses a versioned dependency that carries unsafe
# build flags, so this fails if any target of the package has one.
#
#   bash scripts/test-url-dependency.sh [--keep]     (--keep leaves the temporary folder for a look)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
KEEP=0
[ "${1:-}" = "--keep" ] && KEEP=1

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vf-url-dep.XXXXXX")
cleanup() { if [ "$KEEP" = 1 ]; then echo "left in $WORK" >&2; else rm -rf "$WORK"; fi; }
trap cleanup EXIT

# The clone's folder name is the package's identity for SwiftPM.
CLONE="$WORK/viewfinder"
CONSUMER="$WORK/consumer"
git clone --quiet --no-local "$ROOT" "$CLONE"
git -C "$CLONE" -c user.name=test -c user.email=test@localhost tag -a 1.0.0 -m "packaging test" HEAD
echo "testing $(git -C "$CLONE" rev-parse --short HEAD) tagged 1.0.0 as a URL dependency" >&2

cp -R "$CLONE/Examples/CustomStage" "$CONSUMER"
rm -rf "$CONSUMER/.build"
MANIFEST="$CONSUMER/Package.swift"
grep -q '\.package(path: "\.\./\.\.")' "$MANIFEST" || { echo "the example no longer depends on ../.. by path: update this script" >&2; exit 1; }
# The example names the dependency by its folder; by URL it is the clone's folder name.
sed -i \
    -e "s|\.package(path: \"\.\./\.\.\")|.package(url: \"file://$CLONE\", from: \"1.0.0\")|" \
    -e 's|^let viewfinder = .*$|let viewfinder = "viewfinder"|' \
    "$MANIFEST"
grep -q "file://$CLONE" "$MANIFEST" || { echo "could not rewrite the dependency line" >&2; exit 1; }

# The consumer's own packages (argument parser, logging) resolve as the main package's do.
flock "$LOCK" swift build --package-path "$CONSUMER" --scratch-path "$CONSUMER/.build"
RESOLVED=$(grep -A6 '"identity" : "viewfinder"' "$CONSUMER/Package.resolved" || true)
echo "$RESOLVED" | grep -q '"version" : "1.0.0"' || { echo "Viewfinder was not resolved as version 1.0.0:" >&2; echo "$RESOLVED" >&2; exit 1; }

DEMO="$CONSUMER/.build/debug/custom-stage-demo"
OUT=$("$DEMO" "negative:strength=1,null")
echo "$OUT"
# The demo runs the user's stage on a YUYV, an NV12 and an MJPEG sim camera (typed pixel views).
EXPECTED="YUYV: ran negative,null on 30 frames; 30 carried the negative stage's metadata
NV12: ran negative,null on 30 frames; 30 carried the negative stage's metadata
MJPEG: ran negative,null on 30 frames; 30 carried the negative stage's metadata"
[ "$OUT" = "$EXPECTED" ] || { echo "unexpected output from the user's stage" >&2; exit 1; }
if "$DEMO" "negative:strenght=1" 2>/dev/null; then
    echo "an unknown option of the user's stage was accepted" >&2; exit 1
fi
# The user's own `viewfinder` (ViewfinderCommandLine with their stages): the stage listed and run
# by name, its metadata in every JSON line, and its options checked (a misspelt one is a usage error).
MYVF="$CONSUMER/.build/debug/my-viewfinder"
"$MYVF" stages > "$WORK/stages.txt"
grep -q '^negative' "$WORK/stages.txt" || { echo "my-viewfinder does not list the user's stage" >&2; exit 1; }
"$MYVF" run --device "pattern:width=64,height=32,frames=5" --stages negative:strength=1 --metadata "$WORK/m.jsonl" >/dev/null
[ "$(grep -c '"negative.mean_luma"' "$WORK/m.jsonl")" = 5 ] || { echo "my-viewfinder run: the stage's metadata is not in every line" >&2; exit 1; }
set +e
"$MYVF" run --device "pattern:width=64,height=32,frames=5" --stages negative:strenght=1 2>/dev/null; rc=$?
set -e
[ "$rc" = 64 ] || { echo "my-viewfinder: an unknown option of the user's stage gave $rc, not 64" >&2; exit 1; }
# The stage's own test ("Writing a stage", Step 8, as the article shows it) builds and passes.
flock "$LOCK" swift test --package-path "$CONSUMER" --scratch-path "$CONSUMER/.build" 2>&1 | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || { echo "the example's test (the article's Step 8) failed" >&2; exit 1; }
echo "URL dependency test passed" >&2
