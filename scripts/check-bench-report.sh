#!/usr/bin/env bash
# Renders `viewfinder bench --report` in headless Chromium and checks that its SVG plots drew:
# the DOM Chromium built holds every plot with its series (polylines, bars, points), and the
# screenshot is not blank (enough non-white pixels, several colours).
#
#   bash scripts/check-bench-report.sh [OUT_DIR]    # default OUT_DIR: .build/test-artifacts/bench-report
#
# Leaves report.html, report.json, dom.html and screenshot.png in OUT_DIR (the test artifacts).
# Needs chromium (scripts/install-deps.sh installs it). About 20 s plus the build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
LOCK=${VF_BUILD_LOCK:-/tmp/vf-build.lock}
OUT=${1:-.build/test-artifacts/bench-report}
command -v chromium >/dev/null || { echo "check-bench-report: chromium is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }

flock "$LOCK" swift build --product viewfinder >/dev/null
BIN=$(swift build --show-bin-path)/viewfinder
# Made after the build (SwiftPM owns .build/artifacts and may clear it; this path is ours).
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# A small sim camera with jitter and a pipeline of two stages: every kind of plot has data.
flock "$LOCK" "$BIN" bench --device sim:latency=3,fps=30,width=640,height=360,jitter=1 --duration 3 \
    --stages exposure:mode=continuous,focus --report "$OUT/report.html" --json > "$OUT/report.json"

# Chromium's own sandbox needs user namespaces, which containers and root lack.
CHROME=(chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --disable-dev-shm-usage)
HOME_DIR=$(mktemp -d)
trap 'rm -rf "$HOME_DIR"' EXIT
HOME="$HOME_DIR" timeout 120 "${CHROME[@]}" --user-data-dir="$HOME_DIR/p" --dump-dom "file://$OUT/report.html" > "$OUT/dom.html" 2>/dev/null
HOME="$HOME_DIR" timeout 120 "${CHROME[@]}" --user-data-dir="$HOME_DIR/p" --window-size=1400,4200 --screenshot="$OUT/screenshot.png" "file://$OUT/report.html" >/dev/null 2>&1

python3 - "$OUT" <<'PY'
import json, re, struct, sys, zlib
out = sys.argv[1]
report = json.load(open(f"{out}/report.json"))
dom = open(f"{out}/dom.html", encoding="utf-8").read()
svgs = re.findall(r"<svg\b.*?</svg>", dom, flags=re.S)
stages = len(report["pipeline"]["stages"])
controls = sum(1 for c in report["controls"] if c["steps"])
# Histogram, intervals over time, latency over time, delivered rate, drops, ring occupancy; one
# per stage and per stepped control.
expected = 6 + stages + controls
problems = []
if len(svgs) != expected:
    problems.append(f"{len(svgs)} svg plots in the DOM, expected {expected}")
empty = [i for i, s in enumerate(svgs) if not re.search(r'class="series"', s)]
if empty:
    problems.append(f"plots without a drawn series: {empty}")

# Decode the PNG (8-bit RGB or RGBA, non-interlaced, as Chromium writes it) with the standard library.
data = open(f"{out}/screenshot.png", "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "screenshot is not a PNG"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8]); body = data[pos + 8:pos + 8 + n]; pos += 12 + n
    if kind == b"IHDR": w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT": idat += body
bpp = {2: 3, 6: 4}[ctype]
raw = zlib.decompress(idat); stride = w * bpp
prev = bytearray(stride); nonwhite = 0; colours = set()
for y in range(h):
    f = raw[y * (stride + 1)]; line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0; b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    prev = line
    for x in range(0, w, 2):
        px = tuple(line[x * bpp:x * bpp + 3])
        if px != (255, 255, 255): nonwhite += 1
        if y % 4 == 0: colours.add(tuple(v // 32 for v in px))
fraction = nonwhite / (w * h / 2)
if fraction < 0.02: problems.append(f"screenshot nearly blank: {fraction:.4f} non-white")
if len(colours) < 6: problems.append(f"screenshot has {len(colours)} colour classes, expected the plots' palette")
print(f"check-bench-report: {len(svgs)} plots drawn, screenshot {w}x{h}, {100 * fraction:.1f} % non-white, {len(colours)} colour classes; artifacts in {out}")
if problems:
    print("check-bench-report: FAILED: " + "; ".join(problems), file=sys.stderr); sys.exit(1)
PY
