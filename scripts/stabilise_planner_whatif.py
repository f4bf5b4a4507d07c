#!/usr/bin/env python3
"""What the stabiliser's camera-path planner would leave if it knew more of the future.

A path-level port of `CameraPathPlanner` (Sources/ViewfinderStages/PathPlanner.swift): each frame
it plans the frames its look-ahead holds plus `predict` frames beyond them, minimising the summed
squared second differences plus a weak pull to the camera (time constant 30 frames while a pan is
followed, 60 while the camera is held), a terminal pull onto the predicted course, under the hard
crop constraint |path - camera| <= margin; the intent (hold ... follow) is r^4/(1 + r^4), r the
camera's travel over the last 60 frames (a fitted line) over the margin; beyond the look-ahead the
camera is predicted by the line fitted to the last 24 known frames, its slope times the intent.
The stage's rotation and zoom are left out: x and y are planned alone, with margins of 28 and
16 px (640x360, 90 % kept, less what rotation takes).

The motions are the report's (`viewfinder-report --stabilise-motions`): intended motion plus AR(1)
shake per axis, 120 frames; the score is the report's measure (path less its 15-frame centred
moving average, RMS) of the planned path over the camera's, both axes summed, mean of 3 seeds.
This port reproduces the stage's exact-measure figures on the fast pans (pan 4 px/frame: 14.0 %
here against 12.2-13.4 % on photographs; start/stop: 10.9 % against 9.2-10.0 %).

Rows:
  look-ahead L             the planner as it is, with L frames of look-ahead
  ... + future camera      the frames beyond the look-ahead are the camera's real ones (no
                           prediction): what a perfect predictor of the camera would give
  ... + future intent      they are the intended motion without the shake
  ... + velocity oracle    beyond the look-ahead, the intended motion (no shake) at the window's
                           last frame continued at its velocity there: the best any predictor
                           that sees only the known frames could do on these motions (a pan's
                           speed is known once its ramp is in the window)
  15, objective: the measure   `plan_measure`: the report's measure itself is minimised (plus a
                           little acceleration), alone and with the oracle
  ... predictor X          other predictors and intent windows that use only the known frames

Needs NumPy and SciPy (`pip install numpy scipy`); not part of CI; about a minute.

    python3 scripts/stabilise_planner_whatif.py
"""
import numpy as np
from scipy.optimize import lsq_linear

# The report's motions and measure, as the bound script has them (same folder).
from stabilise_path_bound import FRAMES, high_frequency_rms, pan


def ar(rng, a, sigma):
    v, s, o = 0.0, sigma * np.sqrt(1 - a * a), []
    for _ in range(FRAMES):
        v = a * v + s * rng.standard_normal()
        o.append(v)
    return np.array(o)


def trend(cam, lo, hi):
    """Least-squares line through cam[lo..hi]: (value at hi, slope)."""
    k = np.arange(lo, hi + 1)
    if len(k) < 3:
        return cam[hi], 0.0
    c = np.linalg.lstsq(np.c_[np.ones(len(k)), k - hi], cam[k], rcond=None)[0]
    return c[0], c[1]


def course(cam, t, margin, lookahead, predict, fitted, intent_frames, future, oracle):
    """What frame `t` plans towards: the camera over the look-ahead, then the predicted course
    (the line fitted to the last `fitted` known frames, its slope times the intent; or `future`'s
    frames; or the oracle's). Returns (course, intent, slope)."""
    T = len(cam)
    known = min(lookahead + 1, T - t)
    hi = t + known - 1
    base, slope = trend(cam, max(0, hi - fitted + 1), hi)
    lo_i = max(0, hi - intent_frames + 1)
    _, islope = trend(cam, lo_i, hi)
    r2 = (abs(islope) * (hi - lo_i) / margin) ** 2
    intent = r2 * r2 / (1 + r2 * r2)
    slope *= intent
    if oracle is not None:
        # The best any predictor from the known frames could do: the intended motion (no
        # shake) at the window's last frame, continued at its velocity there.
        base, slope = oracle[hi], (oracle[hi] - oracle[hi - 1] if hi > 0 else 0.0)
        intent = 1.0 if slope != 0 else intent
    cen = np.array([cam[t + k] if k < known else
                    (future[min(t + k, T - 1)] if future is not None else base + slope * (k - known + 1))
                    for k in range(known + predict)])
    return cen, intent, slope


def add_row(rows, rhs, h, n, coefs, w):
    """One least-squares row over the shown history `h` followed by the n planned frames:
    (index, coefficient) pairs, the history's part moved to the right-hand side; skipped when it
    touches no planned frame."""
    row, const = np.zeros(n), 0.0
    for idx, cf in coefs:
        if idx < len(h):
            const += cf * h[idx]
        else:
            row[idx - len(h)] += cf
    if row.any():
        rows.append(w * row)
        rhs.append(-w * const)


def add_pull(rows, rhs, cen, weight):
    """Rows pulling each planned frame to the course with `weight` (squared)."""
    w = np.sqrt(weight)
    for k in range(len(cen)):
        row = np.zeros(len(cen))
        row[k] = w
        rows.append(row)
        rhs.append(w * cen[k])


def plan(cam, margin, lookahead=15, tc=30.0, htc=60.0, predict=30, trend_frames=24, terminal=0.05,
         intent_frames=60, predictor="line", velocity_frames=6, future=None, oracle=None):
    """The path shown on every frame of `cam`, planned causally as the stage does."""
    shown = []
    fitted = velocity_frames if predictor == "velocity" else trend_frames
    for t in range(len(cam)):
        cen, intent, slope = course(cam, t, margin, lookahead, predict, fitted, intent_frames, future, oracle)
        fid = intent / tc ** 4 + (1 - intent) / htc ** 4
        term = intent * terminal
        n = len(cen)
        rows, rhs, h = [], [], shown[-3:]
        for c in range(len(h) + n - 2):
            add_row(rows, rhs, h, n, [(c, 1.0), (c + 1, -2.0), (c + 2, 1.0)], 1.0)
        add_pull(rows, rhs, cen, fid)
        if term > 0:
            st = np.sqrt(term)
            row = np.zeros(n); row[n - 1] = st; rows.append(row); rhs.append(st * cen[n - 1])
            row = np.zeros(n); row[n - 1] = st; row[n - 2] = -st; rows.append(row); rhs.append(st * slope)
        res = lsq_linear(np.array(rows), np.array(rhs), bounds=(cen - margin, cen + margin + 1e-9), method="bvls", tol=1e-10)
        shown.append(res.x[0])
    return np.array(shown)


def plan_measure(cam, margin, lookahead=15, predict=30, smooth=10.0, pull=1e-4, trend_frames=24,
                 intent_frames=60, future=None, oracle=None, **_):
    """The same causal loop with the report's measure itself as the objective: each planned frame's
    distance from its 15-frame centred moving average (the 14 frames shown last included), plus
    `smooth` times the squared second differences and a weak pull to the predicted camera."""
    W = 7
    shown = []
    for t in range(len(cam)):
        cen, _, _ = course(cam, t, margin, lookahead, predict, trend_frames, intent_frames, future, oracle)
        n = len(cen)
        rows, rhs, h = [], [], shown[-2 * W:]
        for c in range(W, len(h) + n - W):
            add_row(rows, rhs, h, n, [(c, 1.0)] + [(j, -1 / (2 * W + 1)) for j in range(c - W, c + W + 1)], 1.0)
        for c in range(max(0, len(h) - 2), len(h) + n - 2):
            add_row(rows, rhs, h, n, [(c, 1.0), (c + 1, -2.0), (c + 2, 1.0)], np.sqrt(smooth))
        add_pull(rows, rhs, cen, pull)
        res = lsq_linear(np.array(rows), np.array(rhs), bounds=(cen - margin, cen + margin + 1e-9), method="bvls", tol=1e-10)
        shown.append(res.x[0])
    return np.array(shown)


def motions():
    t, z = np.arange(FRAMES), np.zeros(FRAMES)
    return {
        "still": (z, z, 0.55, 3.0),
        "pan 0.6": (pan(0.6), z, 0.55, 3.0),
        "pan 2": (pan(2), z, 0.55, 3.0),
        "pan 4": (pan(4), z, 0.55, 3.0),
        "tilt 1": (z, pan(1), 0.55, 3.0),
        "start/stop": (pan(3, still=40, ramp=15, hold=60), z, 0.55, 3.0),
        "bounce": (z, 4 * np.sin(2 * np.pi * 1.8 * t / 30), 0.55, 2.0),
        "slow shake": (z, z, 0.95, 5.0),
    }


def evaluate(future=None, planner=None, **kw):
    planner = planner or plan
    out = {}
    for name, (ix, iy, a, sigma) in motions().items():
        vals = []
        for seed in (1, 2, 3):
            rng = np.random.default_rng(1000 + seed)
            cx, cy = ix + ar(rng, a, sigma), iy + ar(rng, a, sigma)
            fx = fy = ox = oy = None
            if future == "camera":
                fx, fy = cx, cy
            elif future == "intent":
                fx, fy = ix, iy
            elif future == "oracle":
                ox, oy = ix, iy
            px, py = planner(cx, 28.0, future=fx, oracle=ox, **kw), planner(cy, 16.0, future=fy, oracle=oy, **kw)
            vals.append((high_frequency_rms(px) + high_frequency_rms(py)) / (high_frequency_rms(cx) + high_frequency_rms(cy)) * 100)
        out[name] = np.mean(vals)
    return out


def main():
    rows = [("look-ahead 15 (the stage)", {}),
            ("look-ahead 15 + future camera", {"future": "camera"}),
            ("look-ahead 15 + future intent", {"future": "intent"}),
            ("look-ahead 15 + velocity oracle", {"future": "oracle"}),
            ("15, objective: the measure", {"planner": plan_measure}),
            ("15, the measure + velocity oracle", {"planner": plan_measure, "future": "oracle"}),
            ("look-ahead 20", {"lookahead": 20}),
            ("look-ahead 25", {"lookahead": 25}),
            ("look-ahead 30", {"lookahead": 30}),
            ("15, predictor: velocity of last 6", {"predictor": "velocity", "velocity_frames": 6}),
            ("15, velocity of 6, intent over 16", {"predictor": "velocity", "velocity_frames": 6, "intent_frames": 16}),
            ("15, intent over 24", {"intent_frames": 24})]
    names = list(motions())
    print("%-36s" % "planner" + "".join("%11s" % n for n in names))
    for label, kw in rows:
        r = evaluate(**kw)
        print("%-36s" % label + "".join("%10.1f%%" % r[n] for n in names), flush=True)


if __name__ == "__main__":
    main()
