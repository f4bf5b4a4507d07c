#!/usr/bin/env python3
"""How little jitter a pan can leave under the report's measure, whatever the stabiliser.

The stabilisation report (`viewfinder-report --stabilise-motions`) scores a sequence by the
output path's high-frequency part -- the path less its 15-frame centred moving average, RMS,
the mean of both axes -- over the input's. A pan that starts (a velocity ramp) has curvature,
and curvature is what a moving average does not follow, so even a perfect stabiliser leaves
some. This script computes, for the report's two fast panning motions, the least any path can
leave that

  * knows nothing of the pan before the look-ahead shows it (the path is still until
    `start - lookahead`),
  * stays within `margin` px of the intended motion (the crop's room less what the shake needs),
  * and is smooth: it minimises the summed squared second differences (acceleration) over the
    whole sequence, knowing the entire future -- more than any real-time stabiliser knows.

The shake is taken out perfectly (the y axis of the output is still). The input's jitter is
that of the report's filming: intended motion + AR(1) shake per axis (coefficient 0.55, sigma
3 px), the mean over 50 seeds. Units are 640x360 pixels; jitter is in percent, as the report.

Needs NumPy and SciPy (`pip install numpy scipy`); not part of CI.

    python3 scripts/stabilise_path_bound.py
"""
import numpy as np
from scipy.optimize import lsq_linear

FRAMES = 120
WINDOW = 7  # +-7 frames: the report's 15-frame moving average


def pan(speed, still=20, ramp=10, hold=10_000):
    """The report's CameraMotion.pan: still, a linear velocity ramp, a hold, a ramp down."""
    x, acc = np.zeros(FRAMES), 0.0
    for t in range(FRAMES):
        u = t - still
        if u >= 0:
            if u < ramp:
                acc += speed * u / ramp
            elif u < ramp + hold:
                acc += speed
            else:
                acc += speed * max(0.0, 1 - (u - ramp - hold) / ramp)
        x[t] = acc
    return x


def high_frequency_rms(x):
    r = [x[t] - x[t - WINDOW:t + WINDOW + 1].mean() for t in range(WINDOW, len(x) - WINDOW)]
    return float(np.sqrt(np.mean(np.square(r))))


def input_jitter(intended, seeds=50):
    """Mean over seeds of the input's measure: (HF(x) + HF(y)) / 2 with AR(1) shake on both axes."""
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)

        def ar(a=0.55, sigma=3.0):
            v, s, o = 0.0, sigma * np.sqrt(1 - a * a), []
            for _ in range(FRAMES):
                v = a * v + s * rng.standard_normal()
                o.append(v)
            return np.array(o)

        out.append((high_frequency_rms(intended + ar()) + high_frequency_rms(ar())) / 2)
    return float(np.mean(out))


def smoothest_path(intended, start, lookahead, margin):
    """Least summed squared acceleration, still until the look-ahead shows the pan, within margin."""
    first_free = max(0, start - lookahead)
    d2 = np.diff(np.eye(FRAMES), 2, axis=0)[:, first_free:]
    lo, hi = intended[first_free:] - margin, intended[first_free:] + margin
    res = lsq_linear(d2, np.zeros(d2.shape[0]), bounds=(lo, hi), tol=1e-12, max_iter=10_000)
    path = np.zeros(FRAMES)
    path[first_free:] = res.x
    return path


def main():
    motions = [("pan 4 px/frame", pan(4), 20), ("pan 3 px/frame starts and stops", pan(3, still=40, ramp=15, hold=60), 40)]
    margins = [8, 12, 16, 24, 32]
    for name, intended, start in motions:
        base = input_jitter(intended)
        exact = high_frequency_rms(intended) / 2 / base * 100
        print(f"{name}: input jitter {base:.2f} px; the intended motion shown exactly leaves {exact:.1f} %")
        for lookahead in (5, 15):
            cells = []
            for m in margins:
                p = smoothest_path(intended, start, lookahead, m)
                cells.append(f"margin {m:2d} px: {high_frequency_rms(p) / 2 / base * 100:4.1f} %")
            print(f"  smoothest path, look-ahead {lookahead:2d}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
