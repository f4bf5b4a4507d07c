"""Save every Nth frame of Viewfinder's shared-memory feed as a PNG, with its metadata, for a
training or evaluation data set.

    viewfinder run --device /dev/video0 --stages exposure:mode=continuous,stabilise --shm cam &
    python3 dataset_writer.py cam out/ --every 10 [--count 500] [--grey]

Writes out/000000123.png (BGR, or luma only with --grey) and out/000000123.json (the frame's
metadata as `viewfinder run --metadata` writes it, plus the ring index and what this writer
missed) for frames whose sequence number is a multiple of N. Frames are copied out of the ring
first (``frame.copy()``), so slow PNG compression never sees a half-overwritten picture.
Needs NumPy; PNG writing uses OpenCV when installed, else a small built-in PNG encoder.
"""
import argparse
import json
import os
import struct
import zlib

import numpy as np

from viewfinder_frames import FrameReader

try:
    import cv2
except ImportError:
    cv2 = None


def write_png(path, image):
    """PNG of a uint8 (h, w) grey or (h, w, 3) BGR image."""
    if cv2 is not None:
        if not cv2.imwrite(path, image):
            raise OSError("could not write " + path)
        return
    h, w = image.shape[:2]
    colour = image.ndim == 3
    rgb = image[:, :, ::-1] if colour else image
    raw = b"".join(b"\0" + np.ascontiguousarray(rgb[y]).tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2 if colour else 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 6)))
        f.write(chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ring", help="the name given to viewfinder run --shm")
    ap.add_argument("directory")
    ap.add_argument("--every", type=int, default=10, help="keep frames whose sequence number is a multiple of N")
    ap.add_argument("--count", type=int, default=0, help="stop after this many images (0: until the run ends)")
    ap.add_argument("--grey", action="store_true", help="save the luma plane only")
    args = ap.parse_args()
    if args.every < 1:
        ap.error("--every must be at least 1")
    os.makedirs(args.directory, exist_ok=True)

    saved = 0
    with FrameReader(args.ring, wait=10) as reader:
        for frame in reader:
            if frame.sequence % args.every:
                continue
            try:
                kept = frame.copy()
            except BufferError:          # overwritten while copying: the camera moved on
                continue
            stem = os.path.join(args.directory, "%09d" % kept.sequence)
            image = np.ascontiguousarray(kept.y) if args.grey else kept.to_bgr()
            write_png(stem + ".png", image)
            meta = dict(kept.metadata or {})
            meta.update({"ring_index": kept.index, "ring": args.ring, "missed_by_writer": reader.missed})
            with open(stem + ".json", "w") as f:
                json.dump(meta, f, indent=1, sort_keys=True)
            saved += 1
            if args.count and saved >= args.count:
                break
    print("saved %d frames to %s" % (saved, args.directory))


if __name__ == "__main__":
    main()
