#!/usr/bin/env bash
# Builds the DocC documentation of the public modules with swift-docc-plugin and fails on any
# warning (a broken symbol link, a missing tutorial resource, an unknown directive), so the
# catalogs cannot rot. The archives land in .build/docs/<Module>.doccarchive.
#
#   bash scripts/build-docs.sh            # all public modules
#   bash scripts/build-docs.sh Viewfinder # one module
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
    modules=(Viewfinder ViewfinderSim ViewfinderStages ViewfinderV4L2 ViewfinderSinks ViewfinderKit)
fi
out=.build/docs
mkdir -p "$out"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for m in "${modules[@]}"; do
    echo "== documentation: $m" >&2
    # The plugin's own --warnings-as-errors is passed on to docc; the grep below also catches a
    # warning from the symbol graph extraction, which docc does not see.
    if ! flock "$LOCK" swift package --allow-writing-to-directory "$out" generate-documentation \
            --target "$m" --output-path "$out/$m.doccarchive" --warnings-as-errors >"$log" 2>&1; then
        cat "$log" >&2
        echo "build-docs: $m failed" >&2
        status=1
        continue
    fi
    if grep -E "warning:" "$log" >&2; then
        echo "build-docs: $m has documentation warnings" >&2
        status=1
    fi
done
[ $status = 0 ] && echo "build-docs: ${#modules[@]} modules documented without warnings in $out" >&2
exit $status
