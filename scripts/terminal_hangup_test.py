#!/usr/bin/python3
"""A real terminal hang-up ends a run as Ctrl-C does (used by scripts/test.sh).

`viewfinder run` runs on a pseudo-terminal (so it shows its status line there), writing a y4m
file; after 3 s the terminal's master side is closed: the kernel hangs the terminal up and sends
SIGHUP. The run must exit 0 (not be killed, not trap on a write to the hung-up terminal) and the
file must hold whole frames. Usage: terminal_hangup_test.py VIEWFINDER_BINARY SCRATCH_DIR
"""
import os
import pty
import signal
import sys
import time

binary, scratch = sys.argv[1], sys.argv[2]
os.makedirs(scratch, exist_ok=True)
out = os.path.join(scratch, "hangup.y4m")
if os.path.exists(out):
    os.remove(out)
pid, master = pty.fork()
if pid == 0:
    # As in a terminal's session, whatever this script inherited (`nohup` ignores SIGHUP, and an
    # ignored signal stays ignored across exec).
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    os.execv(binary, [binary, "run", "--device", "sim:width=320,height=240", "--duration", "30", "--output", out])
time.sleep(3)
seen = b""
try:
    seen = os.read(master, 65536)
except OSError:
    pass
os.close(master)
t0 = time.time()
_, status = os.waitpid(pid, 0)
took = time.time() - t0
failed = 0
def check(ok, what):
    global failed
    print(("ok: " if ok else "FAILED: ") + what)
    failed += 0 if ok else 1
check(b"fps" in seen, "the status line was on the terminal")
check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
      "the hang-up ended the run with exit 0 (%s)" % ("exit %d" % os.WEXITSTATUS(status) if os.WIFEXITED(status) else "signal %d" % os.WTERMSIG(status)))
check(took < 10, "within %.2f s" % took)
data = open(out, "rb").read() if os.path.exists(out) else b""
header_end = data.find(b"\n") + 1
frame = 320 * 240 * 2 + len(b"FRAME\n")   # 4:2:2 planar from the sim's YUYV
frames = (len(data) - header_end) // frame if header_end > 0 else 0
check(data.startswith(b"YUV4MPEG2") and frames >= 30 and (len(data) - header_end) % frame == 0,
      "the file holds %d whole frames" % frames)
print("terminal-hangup: %d failed" % failed)
sys.exit(1 if failed else 0)
