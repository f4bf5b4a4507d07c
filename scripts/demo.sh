#!/usr/bin/env bash
# The main job on the sim camera: installs what is missing, builds the release binary, then
#  1. runs the sim camera (1280x720, hand-shake, 50 Hz flicker, under-exposed, out of focus)
#     through auto-exposure, autofocus and stabilisation, with per-frame metadata,
#  2. records a 5-second crash-safe movie through the same stages,
#  3. takes a JPEG still,
# and leaves everything in ./out for a person to look at.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
bash scripts/install-deps.sh
flock "${VF_BUILD_LOCK:-/tmp/vf-build.lock}" swift build -c release --product viewfinder >&2
vf=.build/release/viewfinder
mkdir -p out
scene="sim:width=1280,height=720,fps=30,shake=4,flicker=50,exposure=2,focus=150,seed=3"
stages="exposure:mode=continuous,focus:mode=auto,stabilise"

echo "== 1. pipeline run: $stages" >&2
$vf run --device "$scene" --stages "$stages" --frames 150 --metadata out/frames.jsonl --force
echo "== 2. movie" >&2
$vf record --device "$scene" --stages "$stages" --duration 5 --output out/demo.mov --force
echo "== 3. still" >&2
$vf snap --device "$scene" --stages "exposure:mode=continuous,focus:mode=auto" --warmup 45 --output out/still.jpg --force
echo >&2
echo "Look at: out/demo.mov (a movie, e.g. ffplay out/demo.mov), out/still.jpg, and out/frames.jsonl" >&2
echo "(one JSON line per frame: exposure converging, focus scanning then locked, motion and correction vs. the sim's truth)." >&2
