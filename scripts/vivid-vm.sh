#!/usr/bin/env bash
# vivid-vm.sh - run one host program inside a throw-away QEMU VM that boots
# Debian's stock kernel with the kernel's own virtual test drivers loaded:
#
#   * vivid      - virtual V4L2 device(s); /dev/video0 is a webcam-like capture node
#   * snd-aloop  - ALSA loopback sound card   (card 0, id "Loopback")
#   * snd-dummy  - ALSA dummy sound card      (card 1, id "Dummy")
#
# The program (an ELF binary or a #!/bin/sh script) is copied into an
# initramfs together with the shared libraries `ldd` reports for it, run as
# root inside the VM, and its stdout+stderr are streamed back.  The script
# exits with the program's exit code (or 125 if the VM never reported one).
# Libraries loaded with dlopen() are invisible to ldd: add them with -f.
#
# Usage:
#   vivid-vm.sh [options] PROGRAM [ARGS...]
#
# Options:
#   -f, --file SRC[:DST]   also copy file or directory SRC into the VM (at DST,
#                          default /test/<name>); ELF files bring their ldd
#                          libraries. Repeatable.
#   --accel tcg|kvm        QEMU accelerator (default: tcg, see note below)
#   --mem MB               guest memory (default 1024)
#   --smp N                guest CPUs (default 2)
#   --timeout S            kill the VM after S seconds (default 600)
#   --env NAME=VALUE       export NAME=VALUE to the program in the VM. Repeatable.
#   --vivid-opts "..."     module options for vivid (default: "n_devs=1")
#   --no-install           do not apt-get install missing host tools
#   --keep                 keep the per-run work dir (initrd, console.log)
#   -v, --verbose          also print the guest kernel console and timings
#
# Environment:
#   VIVID_VM_CACHE       cache dir for kernel + base initramfs
#                        (default: ${XDG_CACHE_HOME:-$HOME/.cache}/vivid-vm)
#   VIVID_VM_KERNEL_PKG  versioned kernel package (default: whatever
#                        linux-image-amd64 currently depends on)
#
# Inside the VM: cwd is /test, the program is /test/<name>, /tmp is a tmpfs,
# busybox provides /bin/sh & co (no bash: add it with -f if a script needs
# it), arecord/aplay (+ /usr/share/alsa) are present, everything runs as root.
#
# Accelerator note: TCG (pure emulation, the default) needs no /dev/kvm; on a
# 2-vCPU cloud VM the guest reaches the program ~1.7-2.9 s after QEMU starts
# and a whole run costs ~3-5 s plus the program's own time.  --accel kvm is
# for hosts with working hardware virtualisation.  On nested/paravirtual
# hosts it can be unusable: with the kvm_pvm module QEMU aborts under plain
# "-cpu host" ("failed to set MSR 0x10a"), hence "-cpu host,-arch-capabilities"
# below, and even then the stock kernel boots ~50x slower than under TCG.
#
# Requires root (apt-get, and reading /dev/kvm if --accel kvm). Debian 12 (bookworm).
#
# Viewfinder's copy of ../shared/vivid-vm/vivid-vm.sh (the project's real-driver test tier must not
# depend on a folder outside the repository). Changes: --env NAME=VALUE exports variables to the
# program inside the VM; the default timeout is 600 s. scripts/vivid-tests.sh drives it.

set -euo pipefail

# ----------------------------------------------------------------- options --
ACCEL=tcg MEM=1024 SMP=2 TIMEOUT=600 VIVID_OPTS="n_devs=1" INSTALL=1 VERBOSE=0 KEEP=0
EXTRA_FILES=()
GUEST_ENV=()
while [ $# -gt 0 ]; do
    case "$1" in
        -f|--file)     EXTRA_FILES+=("$2"); shift 2 ;;
        --env)         GUEST_ENV+=("$2"); shift 2 ;;
        --accel)       ACCEL=$2; shift 2 ;;
        --mem)         MEM=$2; shift 2 ;;
        --smp)         SMP=$2; shift 2 ;;
        --timeout)     TIMEOUT=$2; shift 2 ;;
        --vivid-opts)  VIVID_OPTS=$2; shift 2 ;;
        --no-install)  INSTALL=0; shift ;;
        --keep)        KEEP=1; shift ;;
        -v|--verbose)  VERBOSE=1; shift ;;
        -h|--help)     sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --)            shift; break ;;
        -*)            echo "vivid-vm: unknown option $1" >&2; exit 2 ;;
        *)             break ;;
    esac
done
[ $# -ge 1 ] || { echo "usage: $0 [options] PROGRAM [ARGS...]  (--help)" >&2; exit 2; }
NAME=$(basename "$1")                                  # name used inside the VM
PROG=$(readlink -f "$(command -v "$1" || echo "$1")"); shift
[ -f "$PROG" ] || { echo "vivid-vm: no such program: $PROG" >&2; exit 2; }

log()  { echo "vivid-vm: $*" >&2; }
vlog() { [ "$VERBOSE" = 1 ] && log "$@" || true; }
now()  { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }

T_START=$(now)
CACHE=${VIVID_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vivid-vm}
mkdir -p "$CACHE"

# ------------------------------------------------------ 1. host packages ----
# qemu-system-x86: the VM; kmod: depmod and modprobe --show-depends
# (dependency order); cpio: initramfs; alsa-utils: arecord/aplay to copy into
# the guest; xz-utils: to unpack the kernel image.
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v depmod  >/dev/null || need+=(kmod)
command -v cpio    >/dev/null || need+=(cpio)
command -v arecord >/dev/null || need+=(alsa-utils)
command -v xz      >/dev/null || need+=(xz-utils)
APT=(apt-get -o DPkg::Lock::Timeout=300 -qq)   # wait if another apt/dpkg runs
if [ ${#need[@]} -gt 0 ]; then
    [ "$INSTALL" = 1 ] || { log "missing packages: ${need[*]}"; exit 2; }
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${APT[@]}" update
    "${APT[@]}" install -y --no-install-recommends "${need[@]}" >/dev/null
fi
# fetch_deb PKG DIR : download PKG's .deb and unpack it into DIR (no install).
fetch_deb() {
    log "fetching $1"
    rm -rf "$2"; mkdir -p "$2.deb"
    ( cd "$2.deb" && apt-get download -q "$1" 2>&1 | grep -v '^W: Download is performed unsandboxed' ) >&2 || true
    ls "$2.deb"/*.deb >/dev/null || { log "apt-get download $1 failed"; exit 2; }
    dpkg-deb -x "$2.deb"/*.deb "$2"
    rm -rf "$2.deb"
}

# Guest userland: a statically linked busybox.  Taken from the busybox-static
# .deb rather than installed, because installing it would replace the host's
# (dynamic) busybox package.
BUSYBOX=$CACHE/busybox-static/bin/busybox
if [ ! -x "$BUSYBOX" ]; then
    fetch_deb busybox-static "$CACHE/busybox-static"
    [ -x "$BUSYBOX" ] || BUSYBOX=$CACHE/busybox-static/usr/bin/busybox
fi

# ------------------------------------------- 2. Debian kernel + modules -----
# Download the kernel .deb and unpack it into the cache (NOT into /boot).
# The .deb ships no modules.dep (postinst runs depmod), so run depmod -b here.
resolve_kpkg() {
    apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}
KPKG=${VIVID_VM_KERNEL_PKG:-$(resolve_kpkg)}
if [ -z "$KPKG" ] && [ "$INSTALL" = 1 ]; then "${APT[@]}" update; KPKG=$(resolve_kpkg); fi
[ -n "$KPKG" ] || { log "cannot resolve linux-image-amd64 (apt-get update?)"; exit 2; }
KDIR=$CACHE/$KPKG
if [ ! -f "$KDIR/.done" ]; then
    rm -rf "$KDIR"; mkdir -p "$KDIR"
    fetch_deb "$KPKG" "$KDIR/root"
    KVER=$(ls "$KDIR/root/lib/modules" | head -n1)
    depmod -b "$KDIR/root" "$KVER"
    touch "$KDIR/.done"
fi
KROOT=$KDIR/root
KVER=$(ls "$KROOT/lib/modules" | head -n1)
VMLINUZ=$KROOT/boot/vmlinuz-$KVER
# Boot speed-up: under TCG, the kernel's own XZ decompressor costs ~2 s of
# emulated CPU time.  Debian's kernel has CONFIG_PVH=y, so QEMU can boot the
# uncompressed ELF vmlinux directly.  Extract it once (like the kernel's
# scripts/extract-vmlinux: find the XZ stream inside the bzImage); fall back
# to the bzImage if anything goes wrong.
KERNEL=$VMLINUZ
if [ ! -s "$KDIR/vmlinux" ] && [ ! -f "$KDIR/vmlinux.failed" ]; then
    off=$(LC_ALL=C grep -abo $'\xfd7zXZ\x00' "$VMLINUZ" | head -n1 | cut -d: -f1)
    # (tail gets SIGPIPE when xz stops at the end of the stream: ignore that)
    if [ -n "$off" ] && { tail -c +$((off + 1)) "$VMLINUZ" || true; } |
                        xz -dc --single-stream > "$KDIR/vmlinux.tmp" 2>/dev/null &&
       [ "$(head -c4 "$KDIR/vmlinux.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
        mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux"
    else
        rm -f "$KDIR/vmlinux.tmp"; touch "$KDIR/vmlinux.failed"
        log "could not extract vmlinux; booting the compressed bzImage (slower)"
    fi
fi
[ -s "$KDIR/vmlinux" ] && KERNEL=$KDIR/vmlinux

# --------------------------------------------------- helper: copy + ldd -----
# copy_in STAGE SRC DST : copy SRC to STAGE/DST; if it is a dynamically linked
# ELF, also copy every library ldd resolves (and the dynamic loader) to the
# same absolute path inside STAGE (so RUNPATHs like a toolchain's lib dir
# keep working).  Directories are copied recursively, without ldd.
copy_in() {
    local stage=$1 src=$2 dst=$3 lib
    mkdir -p "$stage/$(dirname "$dst")"
    if [ -d "$src" ]; then cp -rL "$src" "$stage/$dst"; return; fi
    cp -L "$src" "$stage/$dst"
    if ldd "$src" >/dev/null 2>&1; then
        ldd "$src" | grep 'not found' | sed "s|^|vivid-vm: warning: $src: |" >&2 || true
        for lib in $(ldd "$src" | awk '/=> \// {print $3} /^[ \t]*\// {print $1}'); do
            [ -e "$stage/$lib" ] && continue
            mkdir -p "$stage/$(dirname "$lib")"
            cp -L "$lib" "$stage/$lib"
        done
    fi
}

# ------------------------------------------- 3a. base initramfs (cached) ----
# busybox + kernel modules (decompressed, in dependency order) + arecord/aplay
# + /init.  Rebuilt only when the kernel, busybox, alsa-utils or this script
# change.  Linux accepts concatenated cpio archives, so the per-run program
# archive (3b) is simply appended to this one.
MODS=(vivid snd-dummy snd-aloop)

BASE_KEY=$( { echo "$KPKG ${MODS[*]}"; cat "$0"; md5sum "$BUSYBOX" "$(command -v arecord)"; } | md5sum | cut -c1-12)
BASE=$CACHE/base-$BASE_KEY.cpio.gz
T_BUILD0=$(now)
if [ ! -f "$BASE" ]; then
    log "building base initramfs ($KVER)"
    rm -f "$CACHE"/base-*.cpio.gz   # drop stale ones
    S=$(mktemp -d "$CACHE/stage.XXXXXX")
    mkdir -p "$S"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,etc,test,modules}
    cp "$BUSYBOX" "$S/bin/busybox"
    for applet in $("$BUSYBOX" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$S/bin/$applet"
    done

    # Resolve insmod order from the package's own modules.dep (ignoring any
    # /etc/modprobe.d config of this host), de-duplicated across modules.
    : > "$S/modules/order"
    for m in "${MODS[@]}"; do
        modprobe -C /dev/null -d "$KROOT" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
    done | awk '!seen[$0]++' | while read -r ko; do
        base=$(basename "$ko")
        case "$ko" in   # busybox insmod wants plain .ko files
            *.ko.xz)  xz   -dc "$ko" > "$S/modules/${base%.xz}";  base=${base%.xz} ;;
            *.ko.zst) zstd -qdc "$ko" > "$S/modules/${base%.zst}"; base=${base%.zst} ;;
            *.ko.gz)  gzip -dc "$ko" > "$S/modules/${base%.gz}";  base=${base%.gz} ;;
            *)        cp "$ko" "$S/modules/$base" ;;
        esac
        echo "$base" >> "$S/modules/order"
    done

    # ALSA userland for in-guest checks (libasound needs its config tree).
    copy_in "$S" "$(command -v arecord)" /usr/bin/arecord
    copy_in "$S" "$(command -v aplay)"   /usr/bin/aplay
    mkdir -p "$S/usr/share"; cp -a /usr/share/alsa "$S/usr/share/"
    echo "root:x:0:0:root:/root:/bin/sh" > "$S/etc/passwd"
    echo "root:x:0:"                     > "$S/etc/group"
    echo "audio:x:29:"                  >> "$S/etc/group"
    echo "video:x:44:"                  >> "$S/etc/group"

    # /init: ttyS0 = kernel console (log), ttyS1 = program output (host stdout),
    # ttyS2 = program exit code.
    cat > "$S/init" <<'EOF'
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm /dev/pts /root
mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /dev/shm
echo "init: uptime $(cut -d' ' -f1 /proc/uptime) loading modules"
# /modules/order: .ko files in dependency order (base archive);
# /modules/options: "module_name options..." lines (per-run archive).
while read -r ko; do
    name=$(echo "${ko%.ko}" | tr - _)
    opts=$(sed -n "s/^$name //p" /modules/options)
    insmod /modules/$ko $opts || echo "init: insmod $ko $opts FAILED"
done < /modules/order
# devtmpfs creates the nodes asynchronously; wait up to ~2 s for them
i=0; while [ ! -e /dev/video0 ] || [ ! -e /dev/snd/controlC1 ]; do
    i=$((i+1)); [ $i -gt 40 ] && break; sleep 0.05; done
echo "init: devices: $(ls /dev/video* /dev/v4l-* /dev/snd/ 2>/dev/null | tr '\n' ' ')"
cat /proc/asound/cards
stty -F /dev/ttyS1 raw -echo 2>/dev/null
stty -F /dev/ttyS2 raw -echo 2>/dev/null
T0=$(cut -d' ' -f1 /proc/uptime)
echo "init: uptime $T0 starting: $(cat /test/.run)"
cd /test
sh /test/.run </dev/null >/dev/ttyS1 2>&1
RC=$?
T1=$(cut -d' ' -f1 /proc/uptime)
echo "init: uptime $T1 program exited rc=$RC"
echo "$RC $T0 $T1" > /dev/ttyS2
sync
poweroff -f
EOF
    chmod +x "$S/init"
    ( cd "$S" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 ) | gzip -1 > "$BASE.tmp"
    # Pad with zeros to a 4-byte boundary: the kernel only recognises an
    # uncompressed cpio appended after it if it starts 4-byte aligned.
    truncate -s $(( ( $(stat -c %s "$BASE.tmp") + 3 ) / 4 * 4 )) "$BASE.tmp"
    mv "$BASE.tmp" "$BASE"
    rm -rf "$S"
fi

# ---------------------------------------------- 3b. per-run program cpio ----
W=$(mktemp -d "$CACHE/run.XXXXXX")
if [ "$KEEP" = 1 ]; then log "work dir: $W"; else trap 'rm -rf "$W"' EXIT; fi
S=$W/stage; mkdir -p "$S/test" "$S/modules"
# Module options: snd-aloop is card 0 (id Loopback), snd-dummy card 1 (id Dummy).
cat > "$S/modules/options" <<EOF
vivid $VIVID_OPTS
snd_aloop index=0 pcm_substreams=2
snd_dummy index=1
EOF
copy_in "$S" "$PROG" "/test/$NAME"
chmod +x "$S/test/$NAME"
for spec in "${EXTRA_FILES[@]}"; do
    src=${spec%%:*}; dst=${spec#*:}; [ "$dst" = "$spec" ] && dst=/test/$(basename "$src")
    copy_in "$S" "$src" "$dst"
done
# /test/.run: "exec /test/NAME 'arg1' 'arg2' ..." with POSIX single-quoting.
{
    for e in "${GUEST_ENV[@]}"; do
        printf "export '%s'\n" "$(printf '%s' "$e" | sed "s/'/'\\\\''/g")"
    done
    printf "exec '/test/%s'" "$NAME"
    for a in "$@"; do printf " '%s'" "$(printf '%s' "$a" | sed "s/'/'\\\\''/g")"; done
    echo
} > "$S/test/.run"
# -R 0:0: files owned by root.  Left uncompressed on purpose: gunzip inside an
# emulated (TCG) guest is slower than copying the extra bytes.
( cd "$S" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 ) > "$W/prog.cpio"
cat "$BASE" "$W/prog.cpio" > "$W/initrd"
T_BUILD1=$(now)
vlog "initramfs: $(du -h "$W/initrd" | cut -f1) in $(secs "$T_BUILD0" "$T_BUILD1") s"

# -------------------------------------------------------------- 4. boot -----
case "$ACCEL" in
    kvm) ACCEL_ARGS=(-accel kvm -cpu host,-arch-capabilities) ;;
    tcg) ACCEL_ARGS=(-accel tcg,thread=multi -cpu max) ;;
    *)   log "bad --accel $ACCEL"; exit 2 ;;
esac
: > "$W/rc"; : > "$W/console.log"
T_BOOT=$(now)
set +e
timeout "$TIMEOUT" qemu-system-x86_64 "${ACCEL_ARGS[@]}" -m "$MEM" -smp "$SMP" \
    -nodefaults -no-user-config -display none -no-reboot \
    -kernel "$KERNEL" -initrd "$W/initrd" \
    -append "console=ttyS0 quiet loglevel=4 panic=-1 rdinit=/init" \
    -serial "file:$W/console.log" -serial stdio -serial "file:$W/rc" </dev/null
QRC=$?
set -e
T_END=$(now)

# ------------------------------------------------------------ 5. result -----
read -r RC GT0 GT1 < "$W/rc" || true
if [ "$VERBOSE" = 1 ] || [ -z "${RC:-}" ]; then
    log "---- guest console ----"; tr -d '\r' < "$W/console.log" >&2; log "-----------------------"
fi
if [ -z "${RC:-}" ]; then
    [ $QRC = 124 ] && log "VM timed out after ${TIMEOUT}s" || log "VM ended without an exit code (qemu rc=$QRC)"
    exit 125
fi
vlog "timings: initramfs $(secs "$T_BUILD0" "$T_BUILD1") s, guest boot-to-program ${GT0} s (guest uptime)," \
     "program $(secs "$GT0" "$GT1") s, qemu wall $(secs "$T_BOOT" "$T_END") s, total $(secs "$T_START" "$T_END") s"
exit "$RC"
