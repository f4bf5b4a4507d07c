#!/usr/bin/env bash
# The C kernels on arm64 (most Linux camera boxes): builds CViewfinderKernels and
# scripts/arm64/kernels-check.c with the Swift toolchain's clang for aarch64 (Debian's cross libc
# and linker), runs it under qemu-aarch64 (user-mode emulation), and compares its output line by
# line with the same program on this x86-64 machine, once with the AVX2 copies and once forced to
# the portable ones. Every kernel must give the same bits on all three.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
K="$ROOT/Sources/CViewfinderKernels"
CLANG=/opt/swift/usr/bin/clang
command -v "$CLANG" >/dev/null || CLANG=clang
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$CLANG" -O2 -I "$K/include" "$K/kernels.c" "$K/deltaplanes.c" "$K/convert.c" "$ROOT/scripts/arm64/kernels-check.c" -o "$W/x86"
"$CLANG" --target=aarch64-linux-gnu -O2 -I "$K/include" -isystem /usr/aarch64-linux-gnu/include -c "$K/kernels.c" -o "$W/k.o"
"$CLANG" --target=aarch64-linux-gnu -O2 -I "$K/include" -isystem /usr/aarch64-linux-gnu/include -c "$K/deltaplanes.c" -o "$W/d.o"
"$CLANG" --target=aarch64-linux-gnu -O2 -I "$K/include" -isystem /usr/aarch64-linux-gnu/include -c "$K/convert.c" -o "$W/v.o"
"$CLANG" --target=aarch64-linux-gnu -O2 -I "$K/include" -isystem /usr/aarch64-linux-gnu/include -c "$ROOT/scripts/arm64/kernels-check.c" -o "$W/c.o"
aarch64-linux-gnu-gcc -static "$W/k.o" "$W/d.o" "$W/v.o" -o "$W/arm64" "$W/c.o"
"$W/x86" | grep -v '^avx2_active' > "$W/avx2.txt"
"$W/x86" portable | grep -v '^avx2_active' > "$W/portable.txt"
qemu-aarch64 "$W/arm64" | grep -v '^avx2_active' > "$W/arm64.txt"
n=$(wc -l < "$W/arm64.txt")
[ "$n" -ge 20 ] || { echo "check-arm64-kernels: only $n kernel lines from the arm64 build" >&2; exit 1; }
diff "$W/portable.txt" "$W/avx2.txt" >&2 || { echo "check-arm64-kernels: AVX2 and portable copies differ (above)" >&2; exit 1; }
diff "$W/portable.txt" "$W/arm64.txt" >&2 || { echo "check-arm64-kernels: arm64 differs from x86-64 (above)" >&2; exit 1; }
echo "check-arm64-kernels: $n kernel results identical on arm64 (qemu-aarch64), x86-64 portable and x86-64 AVX2" >&2
