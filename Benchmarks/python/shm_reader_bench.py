"""The Python side of `viewfinder-report --frames-out`: reads a shared-memory ring with
viewfinder_frames (zero-copy views, no copy of the pixels) until the run ends, and prints one
JSON line: frames received, seconds from the first to the last, frames missed, and the latency of
each frame on arrival from its capture timestamp, from the moment the output took it from the
engine, and from the moment the slot was complete (CLOCK_MONOTONIC on both sides).

    python3 shm_reader_bench.py NAME [stamped]

With `stamped`, the frames carry `stage_output_ns` in their metadata (the report's last stage
stamps it): the latency from the end of the stage chain is measured too (parsing the metadata
costs time, so the throughput runs leave it out).
"""
import json
import sys
import time

from viewfinder_frames import FrameReader


def quantiles(values):
    if not values:
        return {}
    v = sorted(values)
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
    return {"p50": q(0.5) / 1000, "p99": q(0.99) / 1000, "max": v[-1] / 1000}


def main(name, stamped):
    capture, output, publish, stage = [], [], [], []
    n = 0
    first = last = None
    probe = 0
    with FrameReader(name, wait=30, timeout=5) as reader:
        for f in reader:
            now = time.monotonic_ns()
            y = f.y                          # a strided view of the shared memory: no copy
            probe += int(y[0, 0])            # touch one pixel
            if f.clock == "monotonic":
                capture.append(now - f.timestamp_ns)
            output.append(now - f.output_ns)
            publish.append(now - f.publish_ns)
            if stamped:
                stage.append(now - int(f.metadata["stage_output_ns"]))
            n += 1
            first = first or now
            last = now
        missed = reader.missed
    seconds = (last - first) / 1e9 if n > 1 else 0.0
    print(json.dumps({"frames": n, "seconds": seconds, "fps": (n - 1) / seconds if seconds > 0 else 0.0,
                      "missed": missed, "latency_us": {"capture": quantiles(capture), "output": quantiles(output),
                                                       "publish": quantiles(publish), "stage": quantiles(stage)}}))


if __name__ == "__main__":
    main(sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "stamped")
