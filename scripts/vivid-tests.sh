#!/usr/bin/env bash
# vivid-tests.sh - Viewfinder's real-driver tier: runs the V4L2 backend against the kernel's own
# virtual camera driver (vivid) inside a throw-away QEMU VM (scripts/vivid-vm.sh).
#
# It builds the test bundle (swift build --build-tests, under the shared build lock), boots the VM
# with Debian's kernel + vivid, and runs, inside it:
#   1. VividTests (VIEWFINDER_VIVID=1): discovery (capture nodes only, the format tree, controls),
#      every format the engine handles that vivid offers (YUYV UYVY NV12 YU12 422P GREY RGB3, MJPEG
#      if offered) at 320x180, controls get/set and errors, a 300-frame capture through the engine
#      at 320x180/60 fps with sequence and timestamp checks, and 1920x1080 YUYV fps + CPU;
#   2. VividDisconnectTests (VIEWFINDER_VIVID_DISCONNECT=1): vivid's "Disconnect" control
#      mid-stream must end the run with DeviceError.disconnected delivered to the sinks.
# Exit code: 0 when both pass; the test's failure code otherwise; 125 when the VM failed.
#
# Usage: scripts/vivid-tests.sh [--no-build] [extra vivid-vm.sh options...]
# Environment: VF_BUILD_LOCK (default /tmp/vf-build.lock), VIVID_TIMEOUT (default 600 s).
# Needs root (the VM script installs qemu-system-x86 etc. with apt-get when missing).
# Seen here: ~5-8 s of VM boot plus about a minute of tests under TCG emulation.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
BUILD=1
if [ "${1:-}" = "--no-build" ]; then BUILD=0; shift; fi

T0=$(date +%s)
if [ "$BUILD" = 1 ]; then
    echo "vivid-tests: building the test bundle" >&2
    flock "$LOCK" swift build --build-tests >&2
fi
BIN=$(flock "$LOCK" swift build --show-bin-path)
XCTEST=$BIN/ViewfinderPackageTests.xctest
[ -x "$XCTEST" ] || { echo "vivid-tests: no test bundle at $XCTEST" >&2; exit 2; }

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat > "$W/run-vivid-tests" <<'GUEST'
#!/bin/sh
# Runs inside the VM (busybox sh).
T=/test/ViewfinderPackageTests.xctest
rc=0
echo "== VividTests"
VIEWFINDER_VIVID=1 "$T" --testing-library swift-testing --filter VividTests || rc=$?
echo "== VividDisconnectTests"
VIEWFINDER_VIVID=1 VIEWFINDER_VIVID_DISCONNECT=1 "$T" --testing-library swift-testing --filter VividDisconnectTests || rc=$?
exit $rc
GUEST
chmod +x "$W/run-vivid-tests"
T1=$(date +%s)
set +e
"$ROOT/scripts/vivid-vm.sh" --timeout "${VIVID_TIMEOUT:-600}" -f "$XCTEST" "$@" "$W/run-vivid-tests"
RC=$?
set -e
T2=$(date +%s)
echo "vivid-tests: rc=$RC, build $((T1 - T0)) s, VM run $((T2 - T1)) s" >&2
exit $RC
