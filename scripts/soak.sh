#!/usr/bin/env bash
# The soak (issue 15): the sim camera at 1920x1080, unpaced, through every built-in stage
# (exposure, focus, white_balance, stabilise, deadline, null) into a movie, a raw dump and a video
# data output converting every frame to NV12, in back-to-back sessions of --segment seconds for
# --seconds in all (the viewfinder-soak executable, Examples/Soak/main.swift). Every second it
# samples its resident memory, open descriptors and threads from /proc/self; after each segment
# it checks the books, reads the movie back with ffprobe and replays the dump (frame counts equal
# to what the outputs reported), then deletes both files.
#
#   bash scripts/soak.sh [--seconds N] [--segment S] [--warmup W] [--rss-bound-mb M] [--no-build] [--debug]
#
# Pass: every segment's checks hold; the frame mappings do not change while a session runs and the
# trend after the warm-up of the resident memory outside them (median of the last third of the
# samples against the median of the first third) stays within M MB (default 16); descriptors and threads sampled while a
# session runs never change. Samples go to .build/soak/samples.csv. Defaults: 120 s in one 120 s
# session, 45 s warm-up (the CI run).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
ARGS=()
BUILD=1
CONFIG=release
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) BUILD=0; shift ;;
        --debug) CONFIG=debug; shift ;;
        --seconds|--segment|--warmup|--rss-bound-mb) ARGS+=("$1" "$2"); shift 2 ;;
        -h|--help) sed -n 2,16p "$0"; exit 0 ;;
        *) echo "soak.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
if [ "$BUILD" = 1 ]; then
    flock "$LOCK" swift build -c "$CONFIG" --product viewfinder-soak
fi
mkdir -p .build/soak
BIN=".build/$CONFIG/viewfinder-soak"
[ -x "$BIN" ] || { echo "soak.sh: $BIN is not built (drop --no-build)" >&2; exit 1; }
# The soak itself holds no lock (it is not a timing measurement); it runs niced.
nice -n 10 "$BIN" --dir "${TMPDIR:-/tmp}/viewfinder-soak-$$" --csv .build/soak/samples.csv "${ARGS[@]}"
