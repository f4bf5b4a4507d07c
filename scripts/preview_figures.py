#!/usr/bin/python3
"""Figures for the browser preview (README, issue 13): the CPU the `viewfinder preview` process
uses and the capture-to-preview latency, with 0, 1 and 4 viewers reading /stream, and with one
stalled viewer beside a recording. Run it on a release build, under the build lock:

    flock /tmp/vf-build.lock /usr/bin/python3 scripts/preview_figures.py .build/release/viewfinder [RUNS] [SECONDS]

Each case starts a fresh server on the sim camera, waits 2 s, then measures for SECONDS
(default 8); RUNS runs per case (default 3); prints the median and the range of each figure.
"""
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BIN = sys.argv[1] if len(sys.argv) > 1 else ".build/release/viewfinder"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Viewer(threading.Thread):
    """Reads /stream and counts the pictures (parts) it receives."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.pictures, self.stop = url, 0, False

    def run(self):
        with urllib.request.urlopen(self.url, timeout=10) as r:
            while not self.stop:
                line = r.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
                    r.readline()
                    r.read(n)
                    self.pictures += 1


def state(base):
    with urllib.request.urlopen(base + "/api/state", timeout=5) as r:
        return json.loads(r.read())


def one_run(device, viewers, stalled=False, stages=None):
    out = tempfile.mkdtemp(prefix="vf-figures-")
    cmd = [BIN, "preview", "--device", device, "--port", "0", "--output", out]
    if stages:
        cmd += ["--stages", stages]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = None
        while base is None:
            line = server.stdout.readline()
            m = re.search(r"viewfinder preview: (http://\S+?)/", line)
            if m:
                base = m.group(1)
            if not line:
                raise RuntimeError("server exited")
        sock = None
        if stalled:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", int(base.rsplit(":", 1)[1])))
            sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            req = urllib.request.Request(base + "/api/record", data=b'{"recording": true}', headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=5).read()
        vs = [Viewer(base + "/stream") for _ in range(viewers)]
        for v in vs:
            v.start()
        time.sleep(2.0)
        c0, t0, p0 = cpu_seconds(server.pid), time.monotonic(), [v.pictures for v in vs]
        s0 = state(base)
        time.sleep(SECONDS)
        c1, t1 = cpu_seconds(server.pid), time.monotonic()
        s1 = state(base)
        dt = t1 - t0
        fig = {"cpu_percent": 100 * (c1 - c0) / dt,
               "capture_fps": (s1["captured"] - s0["captured"]) / dt}
        if vs:
            fig["viewer_fps"] = statistics.mean((v.pictures - p) / dt for v, p in zip(vs, p0))
            fig["preview_latency_p50_ms"] = s1["preview"]["latency_ms"]["p50"]
            fig["preview_latency_p99_ms"] = s1["preview"]["latency_ms"]["p99"]
        fig["capture_drops"] = sum(s1.get("drops", {}).values())
        if stalled:
            rec = next(o for o in s1["outputs"] if o["name"] == "recording")
            fig["movie_drops"] = sum(rec["drops"].values())
            fig["stalled_viewer_client_late"] = s1["preview"]["drops"]["client_late"]
            req = urllib.request.Request(base + "/api/record", data=b'{"recording": false}', headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=5).read()
        for v in vs:
            v.stop = True
        if sock:
            sock.close()
        return fig
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def main():
    cases = [
        ("sim 1280x720 YUYV 30 fps, 0 viewers", "sim:width=1280,height=720,fps=30", 0, False),
        ("sim 1280x720 YUYV 30 fps, 1 viewer", "sim:width=1280,height=720,fps=30", 1, False),
        ("sim 1280x720 YUYV 30 fps, 4 viewers", "sim:width=1280,height=720,fps=30", 4, False),
        ("sim 1280x720 MJPEG 30 fps (passed through), 1 viewer", "sim:width=1280,height=720,fps=30,format=mjpeg", 1, False),
        ("sim 1280x720 YUYV 30 fps, 1 viewer + 1 stalled viewer + recording", "sim:width=1280,height=720,fps=30", 1, True),
    ]
    for name, device, viewers, stalled in cases:
        runs = [one_run(device, viewers, stalled) for _ in range(RUNS)]
        parts = []
        for k in runs[0]:
            vals = sorted(r[k] for r in runs)
            parts.append(f"{k} {statistics.median(vals):.1f} [{vals[0]:.1f}–{vals[-1]:.1f}]")
        print(f"{name}: " + ", ".join(parts), flush=True)
    print(f"({RUNS} runs of {SECONDS:.0f} s each; median [min–max]; {BIN})")


if __name__ == "__main__":
    main()
