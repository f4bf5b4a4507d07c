"""Edge map of stabilised frames from Viewfinder's shared-memory feed, with OpenCV.

    viewfinder run --device /dev/video0 --stages stabilise --shm cam &
    python3 edge_map.py cam                     # a window (needs a display and opencv-python)
    python3 edge_map.py cam --save edges.png    # headless: write the last edge map and exit

Each frame's luma is a NumPy view of the shared memory (no copy); Canny reads it directly. Frames
the script was too slow for are skipped (the camera is never held up) and counted.
"""
import argparse
import os
import time

import cv2
import numpy as np

from viewfinder_frames import FrameReader


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ring", help="the name given to viewfinder run --shm")
    ap.add_argument("--save", help="write the last edge map to this PNG instead of showing a window")
    ap.add_argument("--frames", type=int, default=0, help="stop after this many frames (0: until the run ends)")
    ap.add_argument("--low", type=int, default=60)
    ap.add_argument("--high", type=int, default=150)
    args = ap.parse_args()
    if args.save is None and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        ap.error("no display to show a window on (DISPLAY is not set): add --save FILE.png to write the edge map instead")

    shown = 0
    started = time.monotonic()
    edges = None
    with FrameReader(args.ring, wait=10) as reader:
        print(reader)
        for frame in reader:
            luma = frame.y                                   # zero-copy view (strided for YUYV)
            edges = cv2.Canny(np.ascontiguousarray(luma), args.low, args.high)
            if not frame.valid():                            # the writer lapped us mid-frame
                continue
            shown += 1
            if args.save is None:
                overlay = frame.to_bgr()
                overlay[edges > 0] = (0, 255, 0)
                cv2.imshow("viewfinder edges (q quits)", overlay)
                if cv2.waitKey(1) & 0xFF == ord("q"):
                    break
            if args.frames and shown >= args.frames:
                break
        seconds = time.monotonic() - started
        print("%d frames in %.1f s (%.1f fps), %d skipped while busy" % (shown, seconds, shown / max(seconds, 1e-9), reader.missed))
    if args.save and edges is not None:
        cv2.imwrite(args.save, edges)
        print("wrote", args.save)


if __name__ == "__main__":
    main()
