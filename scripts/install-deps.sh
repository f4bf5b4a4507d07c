#!/usr/bin/env bash
# Installs what Viewfinder needs on Debian 12 when it is missing: the C libraries it links
# (through pkg-config; libasound2-dev for sound), alsa-utils (arecord/aplay/amixer for the VM's
# sound tests), ffmpeg (the tests read the movies back with ffprobe/ffmpeg), python3
# (scripts/check-public-api.sh; with NumPy, OpenCV, venv and setuptools/wheel for python/ and its
# tests in scripts/python-tests.sh) and, with --bench, the peers the benchmarks compare against.
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user build and run the C kernels for arm64
# (scripts/check-arm64-kernels.sh). chromium, chromium-driver and python3-selenium run the
# browser preview test (scripts/browser_preview_test.py) headless; chromium also renders the
# bench's HTML report (scripts/check-bench-report.sh: the SVG plots must draw).
# Runs apt-get update once, only if something is missing. Needs root, or sudo.
set -euo pipefail
packages=(pkg-config libv4l-dev libturbojpeg0-dev libjpeg-dev liblz4-dev libasound2-dev alsa-utils ffmpeg util-linux python3
          python3-numpy python3-opencv python3-venv python3-setuptools python3-wheel
          gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
          chromium chromium-driver python3-selenium)
if [ "${1:-}" = "--bench" ]; then
    packages+=(g++ libboost-dev gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good)
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    as_root=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
        as_root=(sudo)
    fi
    echo "install-deps: installing ${missing[*]}" >&2
    "${as_root[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
if ! command -v swift >/dev/null; then
    if [ -x /opt/swift/usr/bin/swift ]; then
        echo "install-deps: swift is at /opt/swift/usr/bin; add it to PATH" >&2
    else
        echo "install-deps: no Swift toolchain found (expected swift on PATH or /opt/swift)" >&2
        exit 1
    fi
fi
