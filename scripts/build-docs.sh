#!/usr/bin/env bash
# Builds the DocC documentation of the public modules with swift-docc-plugin and fails on any
# warning (a broken symbol link, an undocumented parameter, an unknown directive), so the
# catalogs cannot rot. One plugin run builds every module (the package is built once); the
# archives land in .build/plugins/Swift-DocC/outputs/<Module>.doccarchive.
#
#   bash scripts/build-docs.sh            # all public modules
#   bash scripts/build-docs.sh Viewfinder # some modules
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
    modules=(Viewfinder ViewfinderSim ViewfinderStages ViewfinderV4L2 ViewfinderSinks ViewfinderAudio ViewfinderKit ViewfinderPreview ViewfinderCommandLine)
fi
targets=()
for m in "${modules[@]}"; do targets+=(--target "$m"); done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "== documentation: ${modules[*]}" >&2
# --warnings-as-errors makes docc fail on any of its warnings; the grep also catches a warning
# printed outside docc (the symbol graph extraction), which docc does not see.
if ! flock "$LOCK" swift package generate-documentation "${targets[@]}" --warnings-as-errors >"$log" 2>&1; then
    grep -E "error|warning" "$log" | grep -v "NSCocoaErrorDomain" >&2 || cat "$log" >&2
    echo "build-docs: documentation failed" >&2
    exit 1
fi
# SwiftPM's note about a dependency's own unhandled files (swift-distributed-tracing, which
# Hummingbird brings for the preview) is about that package, not our documentation.
if grep -E "warning:" "$log" | grep -vE "^warning: '(swift-distributed-tracing)': found [0-9]+ file\(s\) which are unhandled" >&2; then
    echo "build-docs: documentation warnings" >&2
    exit 1
fi
echo "build-docs: ${#modules[@]} modules documented without warnings (.build/plugins/Swift-DocC/outputs)" >&2
