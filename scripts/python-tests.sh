#!/usr/bin/env bash
# The Python side of the frame outputs: installs python/ (viewfinder_frames) with
# `pip install ./python` into a virtual environment on Debian's /usr/bin/python3 (NumPy and
# OpenCV from Debian, see install-deps.sh), then runs python/tests against the `viewfinder` CLI.
#   VIEWFINDER_BIN   the CLI to test (default .build/debug/viewfinder; build it first)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
VENV=.build-python
export VIEWFINDER_BIN=${VIEWFINDER_BIN:-$PWD/.build/debug/viewfinder}
[ -x "$VIEWFINDER_BIN" ] || { echo "python-tests: no CLI at $VIEWFINDER_BIN (swift build first)" >&2; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv --system-site-packages "$VENV"
fi
# Offline: NumPy comes from the system site packages, setuptools/wheel build the package.
"$VENV/bin/python" -m pip install --quiet --no-index --no-build-isolation --force-reinstall --no-deps ./python
"$VENV/bin/python" -c "import numpy, viewfinder_frames; print('python-tests: viewfinder_frames', viewfinder_frames.__version__, 'numpy', numpy.__version__, 'at', viewfinder_frames.__file__)" >&2
# Run from outside the source tree so the installed package is the one tested.
cd python/tests
"$OLDPWD/$VENV/bin/python" -m unittest discover -s . -v
