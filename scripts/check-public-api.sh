#!/usr/bin/env bash
# Checks what `import ViewfinderKit` exposes: no test double (`Fake*`), no timing harness
# (`*Benchmark*`) and no manual reference counting on frames (`Frame.retain`/`Frame.release`).
#
# It dumps the package's public symbol graphs (`swift package dump-symbol-graph`, public
# symbols, SPI excluded) and reads those of ViewfinderKit and every module it re-exports
# (`@_exported import`, followed transitively), including their extensions of other modules'
# types. It also fails when a library module imports ViewfinderTestSupport, or when the core
# module `Viewfinder` depends on a C library target (it links no codec), or when ViewfinderKit
# depends on the browser preview's server stack (Hummingbird, Prometheus).
#
#   bash scripts/check-public-api.sh      # exit 0 when clean; 1 with one line per offending symbol
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}

# Test doubles must stay out of every module a user can link (all but the test-support target).
leaks=$(grep -rlE '^\s*(@testable |@_exported )?import ViewfinderTestSupport\b' Sources --include='*.swift' \
        | grep -v '^Sources/ViewfinderTestSupport/' || true)
if [ -n "$leaks" ]; then
    echo "check-public-api: library sources import ViewfinderTestSupport (test doubles must not ship):" >&2
    echo "$leaks" | sed 's/^/  /' >&2
    exit 1
fi

# The core engine links no codec: no C library target among its dependencies, direct or not.
desc=$(flock "$LOCK" swift package describe --type json)
python3 - "$desc" <<'EOF2'
import json, sys
targets = {t["name"]: t for t in json.loads(sys.argv[1])["targets"]}
def closure(root):
    """The targets `root` depends on, directly or not, and itself."""
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in seen or name not in targets:
            continue
        seen.add(name)
        todo.extend(targets[name].get("target_dependencies", []))
    return seen
seen = closure("Viewfinder")
codecs = sorted(n for n in seen if targets[n].get("type") == "system-target")
if codecs:
    sys.exit(f"check-public-api: the core module Viewfinder links C libraries: {', '.join(codecs)} (they belong in ViewfinderSim, ViewfinderSinks or ViewfinderV4L2)")
# The browser preview's server stack stays out of the library: a ViewfinderKit user builds no
# HTTP server (only the CLI and the tests depend on ViewfinderPreview).
seen = closure("ViewfinderKit")
server = sorted({p for n in seen for p in targets[n].get("product_dependencies", [])} & {"Hummingbird", "Prometheus", "ServiceLifecycle"})
if "ViewfinderPreview" in seen or server:
    sys.exit(f"check-public-api: ViewfinderKit depends on the preview's server stack: {', '.join(server + (['ViewfinderPreview'] if 'ViewfinderPreview' in seen else []))}")
EOF2

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! flock "$LOCK" swift package dump-symbol-graph --skip-synthesized-members --minimum-access-level public >"$log" 2>&1; then
    cat "$log" >&2
    echo "check-public-api: swift package dump-symbol-graph failed" >&2
    exit 1
fi
dir=$(sed -n 's/^Files written to //p' "$log" | tail -1)
[ -d "$dir" ] || { cat "$log" >&2; echo "check-public-api: no symbol graph directory in the output above" >&2; exit 1; }

python3 - "$dir" <<'EOF'
import json, os, re, sys

graphs = sys.argv[1]

def reexports(module):
    """Modules a module re-exports, from its sources' `@_exported import` lines."""
    found = set()
    folder = os.path.join("Sources", module)
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".swift"):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    found.update(re.findall(r"^\s*@_exported\s+import\s+(\w+)", f.read(), re.M))
    return {m for m in found if os.path.isdir(os.path.join("Sources", m))}

modules, todo = set(), ["ViewfinderKit"]
while todo:
    m = todo.pop()
    if m not in modules:
        modules.add(m)
        todo.extend(reexports(m))

rules = [
    ("a test double (Fake*)", lambda path: any(c.startswith("Fake") for c in path)),
    ("a benchmark harness (*Benchmark*)", lambda path: any("benchmark" in c.lower() for c in path)),
    ("manual reference counting on Frame", lambda path: len(path) == 2 and path[0] == "Frame"
        and (path[1].startswith("retain(") or path[1].startswith("release("))),
]

problems, seen = [], set()
for m in sorted(modules):
    files = [f for f in os.listdir(graphs) if f == m + ".symbols.json" or f.startswith(m + "@")]
    if not any(f == m + ".symbols.json" for f in files):
        sys.exit(f"check-public-api: no symbol graph for {m} in {graphs}")
    for name in sorted(files):
        with open(os.path.join(graphs, name), encoding="utf-8") as f:
            graph = json.load(f)
        for s in graph["symbols"]:
            if s.get("accessLevel") not in ("public", "open"):
                continue
            path = s["pathComponents"]
            for what, matches in rules:
                # One line per offending declaration, not one per member of an offending type.
                reported = any((m, tuple(path[:k]), what) in seen for k in range(1, len(path) + 1))
                if matches(path) and not reported:
                    seen.add((m, tuple(path), what))
                    problems.append(f"  {m}: {'.'.join(path)} ({s['kind']['displayName'].lower()}) is {what}")

if problems:
    print("check-public-api: `import ViewfinderKit` exposes symbols that belong in ViewfinderTestSupport, "
          "Benchmarks/ or the engine's internals:", file=sys.stderr)
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"check-public-api: clean ({', '.join(sorted(modules))})")
EOF
