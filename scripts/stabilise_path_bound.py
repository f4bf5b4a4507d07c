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

Two more bounds, with `--receding [lookahead]` (27 Nov; about 2 minutes), on the shaken camera
path of three seeds (0-2, medians; crop margins 26 / 14 px, keep 0.9 at 640x360 less what
rotation takes), each ratio per seed as the report's:

  * offline: the whole path known and the measure itself minimised under the crop (bounded least
    squares) -- what the crop allows to a path shaped to the moving average;
  * receding horizon: at each frame the camera known `lookahead` frames ahead and predicted on a
    line beyond (velocity from the last `vel` known frames, `pred` frames long), the measure
    minimised over that window with the past fixed and a weak pull `lam` toward the camera, the
    first frame kept -- swept over pred, vel and lam: the best such causal planner.

And with `--oracle [lookahead]` (27 Nov, fifth session; about 4 minutes), what the look-ahead alone allows,
with no shake at all (the camera is the intended motion, margins 26 px):

  * measure-optimal, whole future: still until the look-ahead shows the pan, from then on the
    entire future known and the measure minimised under the crop -- the most any planner with
    perfect pan detection could reach;
  * receding horizon on the unshaken camera: as above, the camera known `lookahead` frames ahead
    and a line beyond, swept over pred, vel and lam -- what knowing only the look-ahead costs.

And with `--kalman [lookahead]` (28 Nov; about 5 minutes), the receding horizon again, but following
the intended motion as the statistically best linear estimate knows it: a Kalman (Rauch-Tung-
Striebel) smoother over the known frames with the shake's true model (AR(1) 0.55, sigma 3 px) and
the intended motion as position, velocity and a random-walk acceleration, extended beyond the
look-ahead by its estimated velocity (and acceleration, held 0/5/10 frames); swept over the
acceleration walk, the prediction's length and the pull; the three best per motion.

And with `--scenarios [lookahead]` (28 Nov, second session; about 8 minutes), the receding horizon
planning for several futures beyond the look-ahead at once (stochastic model-predictive control):
one path per future -- the velocity goes on changing as it did for 0, 5 or 10 frames, or falls to
rest -- their first frames shared, their measures summed; the shared first frame kept.

Needs NumPy and SciPy (`pip install numpy scipy`); not part of CI.

    python3 scripts/stabilise_path_bound.py
    python3 scripts/stabilise_path_bound.py --receding 15
    python3 scripts/stabilise_path_bound.py --oracle 15
    python3 scripts/stabilise_path_bound.py --kalman 15
    python3 scripts/stabilise_path_bound.py --scenarios 15
"""
import itertools
import sys

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


def shake(rng, a=0.55, sigma=3.0):
    """The report's AR(1) shake on one axis."""
    v, s, o = 0.0, sigma * np.sqrt(1 - a * a), []
    for _ in range(FRAMES):
        v = a * v + s * rng.standard_normal()
        o.append(v)
    return np.array(o)


def input_jitter(intended, seeds=50):
    """Mean over seeds of the input's measure: (HF(x) + HF(y)) / 2 with AR(1) shake on both axes."""
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        out.append((high_frequency_rms(intended + shake(rng)) + high_frequency_rms(shake(rng))) / 2)
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


def measure_operator(n):
    """Rows t = WINDOW ... n - WINDOW - 1: x[t] less its moving average, as a matrix."""
    a = np.zeros((n - 2 * WINDOW, n))
    for k, t in enumerate(range(WINDOW, n - WINDOW)):
        a[k, t - WINDOW:t + WINDOW + 1] -= 1 / (2 * WINDOW + 1)
        a[k, t] += 1
    return a


def measure_optimum(camera, margin, still_until=0, **solver):
    """The whole path known: the measure itself least, within margin of the camera (and held at 0
    before frame `still_until`); `solver`: lsq_linear's tolerances."""
    a = measure_operator(len(camera))
    lo, hi = camera - margin, camera + margin
    lo[:still_until], hi[:still_until] = -1e-9, 1e-9
    return lsq_linear(a, np.zeros(a.shape[0]), bounds=(lo, hi), **solver).x


def shaken_ratios(intended, plan, plan_y=None, seeds=3, margins=(26, 14)):
    """Per seed, the report's ratio for `plan(camera, margin)` (`plan_y` on y if given) on the
    intended motion filmed with the report's shake on x and shake alone on y: (HF(x) + HF(y)) of
    the plans over the cameras'."""
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        cx = intended + shake(rng)
        cy = shake(rng)
        out.append((high_frequency_rms(plan(cx, margins[0])) + high_frequency_rms((plan_y or plan)(cy, margins[1])))
                   / (high_frequency_rms(cx) + high_frequency_rms(cy)))
    return out


def velocity_and_acceleration(known, last, vel):
    """The known camera's velocity over its last `vel` frames and how it changed against the `vel`
    before (per frame), `vel` shortened to half the frames known."""
    k = min(vel, last // 2)
    if k == 0:
        return 0.0, 0.0
    v1 = (known[-1] - known[-1 - k]) / k
    v0 = (known[-1 - k] - known[-1 - 2 * k]) / k
    return v1, (v1 - v0) / k


def receding_horizon(camera, margin, lookahead, pred, vel, lam, past=14, acc=0):
    """Each frame: the camera known `lookahead` ahead, a line beyond, the measure least over the window.
    With `acc` > 0 the prediction beyond is a parabola: the velocity of the last `vel` frames keeps
    changing as it did against the `vel` before, for `acc` frames, then holds."""
    n, p = len(camera), np.zeros(len(camera))
    for t in range(n):
        last = min(n - 1, t + lookahead)
        known = camera[:last + 1]
        if acc == 0:
            k = min(vel, last)
            v = (known[-1] - known[-1 - k]) / k if k > 0 else 0.0
            cc = np.concatenate([known, known[-1] + v * np.arange(1, pred + 1)])
        else:
            v1, a = velocity_and_acceleration(known, last, vel)
            cc = np.concatenate([known, known[-1] + np.cumsum(v1 + a * np.minimum(np.arange(1, pred + 1), acc))])
        p[t] = first_step(p, t, cc[t:], cc[t:] - margin, cc[t:] + margin, lam, past)
    return p


def window_rows(p, t, nv, past):
    """The measure's rows over a window of `nv` frames from t, the path before t fixed (from `past`
    frames back): (matrix over the window's frames, right-hand side)."""
    rows, rhs = [], []
    for ctr in range(max(max(0, t - past) + WINDOW, t - WINDOW), t + nv - WINDOW):
        row, b = np.zeros(nv), 0.0
        for j in range(ctr - WINDOW, ctr + WINDOW + 1):
            coef = -1 / (2 * WINDOW + 1) + (1 if j == ctr else 0)
            if j >= t:
                row[j - t] += coef
            else:
                b -= coef * p[j]
        rows.append(row)
        rhs.append(b)
    return np.array(rows), np.array(rhs)


def first_step(p, t, target, lo, hi, lam, past):
    """The receding horizon's step at frame t: the path from t on (`len(target)` frames, within
    lo..hi) that minimises the measure over the window with the path before t fixed (from `past`
    frames back) and a pull `lam` toward `target`; its first frame."""
    nv = len(target)
    rows, rhs = window_rows(p, t, nv, past)
    a = np.vstack([rows, lam * np.eye(nv)])
    bb = np.concatenate([rhs, lam * target])
    return lsq_linear(a, bb, bounds=(lo, hi)).x[0]


def receding_scenarios(camera, margin, lookahead, pred, vel, futures, shared, past=14):
    """A receding horizon that plans for several futures beyond the look-ahead at once (stochastic
    model-predictive control): the velocity of the last `vel` known frames goes on changing as it
    did against the `vel` before for 0, 5, 10 ... frames (`futures`: those counts, or 'stop': it
    falls to rest over 15 frames), one path per future, their first `shared` frames the same, the
    futures' measures summed with equal weights; the shared first frame kept."""
    n, p = len(camera), np.zeros(len(camera))
    steps = np.arange(1, pred + 1)
    for t in range(n):
        last = min(n - 1, t + lookahead)
        known = camera[:last + 1]
        v1, a = velocity_and_acceleration(known, last, vel)
        cams = [np.concatenate([known, known[-1] + np.cumsum(
            v1 * np.maximum(0, 1 - steps / 15) if h == "stop" else v1 + a * np.minimum(steps, h))])[t:] for h in futures]
        nv, c, m = len(cams[0]), min(shared, len(cams[0])), len(cams)
        rows, rhs = window_rows(p, t, nv, past)
        nz = c + m * (nv - c)
        big = np.zeros((m * rows.shape[0], nz))
        lo, hi = np.empty(nz), np.empty(nz)
        lo[:c], hi[:c] = -np.inf, np.inf
        for s, cc in enumerate(cams):
            r0, z0 = s * rows.shape[0], c + s * (nv - c)
            big[r0:r0 + rows.shape[0], :c] = rows[:, :c]
            big[r0:r0 + rows.shape[0], z0:z0 + nv - c] = rows[:, c:]
            lo[z0:z0 + nv - c], hi[z0:z0 + nv - c] = cc[c:] - margin, cc[c:] + margin
            lo[:c], hi[:c] = np.maximum(lo[:c], cc[:c] - margin), np.minimum(hi[:c], cc[:c] + margin)
        # Futures that disagree about the shared frames beyond the crop: meet them half way.
        clash = lo[:c] > hi[:c]
        lo[:c][clash] = hi[:c][clash] = (lo[:c][clash] + hi[:c][clash]) / 2
        hi[:c][clash] += 1e-9
        p[t] = lsq_linear(big, np.tile(rhs, m), bounds=(lo, hi)).x[0]
    return p


def scenarios_main(motions, lookahead):
    for name, intended, _ in motions:
        for futures, shared in (((0,), 1), ((0, 5), 1), ((0, 5, 10), 1), ((0, 10, "stop"), 1), ((0, 5, 10), 5),
                                ((0, 5, 10, "stop"), 3)):
            for vel, pred in ((15, 15), (8, 30)):
                rs = shaken_ratios(intended, lambda c, m: receding_scenarios(c, m, lookahead, pred, vel, futures, shared))
                print(f"{name}: futures {'/'.join(map(str, futures))}, first {shared} shared, velocity over {vel}, "
                      f"prediction {pred}: {100 * np.median(rs):.1f} % (seeds {', '.join(f'{100 * x:.1f}' for x in rs)})", flush=True)


def receding_main(motions, lookahead):
    for name, intended, _ in motions:
        # The plan that shows exactly what was meant: the intended motion on x, still on y.
        exact = shaken_ratios(intended, lambda c, m: intended, plan_y=lambda c, m: np.zeros(FRAMES))
        off = shaken_ratios(intended, measure_optimum)
        best = {}
        for pred, vel, lam in itertools.product((15, 30, 60), (4, 8, 15), (0.0, 0.02, 0.1)):
            best[(pred, vel, lam)] = shaken_ratios(intended, lambda c, m: receding_horizon(c, m, lookahead, pred, vel, lam))
        (pred, vel, lam), rs = min(best.items(), key=lambda kv: np.median(kv[1]))
        print(f"{name}: intended motion shown exactly {100 * np.median(exact):.1f} %, offline optimum "
              f"{100 * np.median(off):.1f} %, best receding horizon at look-ahead {lookahead} "
              f"{100 * np.median(rs):.1f} % (prediction {pred}, velocity over {vel}, pull {lam})")


def oracle_main(motions, lookahead, margin=26):
    for name, intended, start in motions:
        base = 2 * input_jitter(intended)
        best = measure_optimum(intended, margin, still_until=max(0, start - lookahead), tol=1e-12, max_iter=10_000)
        rh = []
        for pred, vel, lam in itertools.product((15, 30, 60), (2, 4, 8), (0.0, 0.02)):
            rh.append((high_frequency_rms(receding_horizon(intended, margin, lookahead, pred, vel, lam)) / base, pred, vel, lam))
        r, pred, vel, lam = min(rh)
        print(f"{name}, no shake, margin {margin} px: measure-optimal with the whole future known once the look-ahead "
              f"shows the pan {100 * high_frequency_rms(best) / base:.1f} %; receding horizon at look-ahead {lookahead} "
              f"{100 * r:.1f} % (prediction {pred}, velocity over {vel}, pull {lam})")
        # A parabola beyond the look-ahead: unshaken, then shaken (seeds 0-2, medians, margins 26 / 14).
        pa = []
        for pred, vel, acc in itertools.product((30, 60), (2, 4), (5, 10, 20)):
            pa.append((high_frequency_rms(receding_horizon(intended, margin, lookahead, pred, vel, 0.0, acc=acc)) / base, pred, vel, acc))
        r, pred, vel, acc = min(pa)
        line = (f"  predicting a parabola (acceleration held {acc} frames, velocities over {vel}, prediction {pred}): "
                f"no shake {100 * r:.1f} %; shaken:")
        for pred, vel, acc in ((pred, vel, acc), (60, 8, 5), (60, 8, 10), (60, 15, 10)):
            rs = shaken_ratios(intended, lambda c, m: receding_horizon(c, m, lookahead, pred, vel, 0.0, acc=acc), margins=(margin, 14))
            line += f" {100 * np.median(rs):.1f} % (velocities over {vel}, held {acc})"
        print(line)


def kalman_intended(camera, q, a=0.55, sigma=3.0):
    """The camera as intended motion (position, velocity, acceleration; the acceleration a random
    walk of `q` px/frame^2 per frame) plus the report's AR(1) shake (coefficient `a`, sigma
    `sigma`), observed exactly. Returns the forward filter's means and covariances and the model
    (F, Q), for `smoothed_window`."""
    f = np.array([[1, 1, 0.5, 0], [0, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, a]], float)
    qm = np.diag([0, 0, q * q, sigma * sigma * (1 - a * a)])
    h = np.array([[1, 0, 0, 1.0]])
    r = 1e-4
    x, pc = np.zeros(4), np.diag([1e-6, 1e-6, 1e-6, sigma * sigma])
    xs, ps = [], []
    for c in camera:
        k = pc @ h.T / (h @ pc @ h.T + r)
        x = x + (k * (c - h @ x)).ravel()
        pc = (np.eye(4) - k @ h) @ pc
        xs.append(x.copy())
        ps.append(pc.copy())
        x, pc = f @ x, f @ pc @ f.T + qm
    return np.array(xs), np.array(ps), f, qm


def smoothed_window(xs, ps, f, qm, first, last):
    """Rauch-Tung-Striebel over frames first..last, knowing the camera up to `last` only."""
    out = [xs[last]]
    xn, pn = xs[last], ps[last]
    for j in range(last - 1, first - 1, -1):
        pp = f @ ps[j] @ f.T + qm
        g = ps[j] @ f.T @ np.linalg.pinv(pp)
        xn = xs[j] + g @ (xn - f @ xs[j])
        pn = ps[j] + g @ (pn - pp) @ g.T
        out.append(xn)
    return np.array(out[::-1])


def receding_kalman(camera, margin, lookahead, q, pred, lam, acc_hold, past=14):
    """As `receding_horizon`, but what the planner follows is the intended motion estimated with the
    true shake model (Kalman smoother over the known frames), extended beyond the look-ahead by its
    estimated velocity and acceleration (the acceleration held `acc_hold` frames); the crop bound
    is the real camera's over the known frames."""
    n, p = len(camera), np.zeros(len(camera))
    xs, ps, f, qm = kalman_intended(camera, q)
    for t in range(n):
        last = min(n - 1, t + lookahead)
        sm = smoothed_window(xs, ps, f, qm, t, last)
        i_end, v_end, a_end = sm[-1][0], sm[-1][1], sm[-1][2]
        steps = np.arange(1, pred + 1)
        beyond = i_end + np.cumsum(v_end + a_end * np.minimum(steps, acc_hold))
        target = np.concatenate([sm[:, 0], beyond])
        bound_c = np.concatenate([camera[t:last + 1], beyond])
        p[t] = first_step(p, t, target, bound_c - margin, bound_c + margin, lam, past)
    return p


def kalman_main(motions, lookahead):
    for name, intended, _ in motions:
        results = []
        for q, pred, lam, hold in itertools.product((0.01, 0.03, 0.1, 0.3), (30, 60), (0.0, 0.02, 0.1), (0, 5, 10)):
            rs = shaken_ratios(intended, lambda c, m: receding_kalman(c, m, lookahead, q, pred, lam, hold))
            results.append((np.median(rs), q, pred, lam, hold, rs))
        results.sort(key=lambda r: r[0])
        for med, q, pred, lam, hold, rs in results[:3]:
            print(f"{name}: Kalman-smoothed intended motion, look-ahead {lookahead}: {100 * med:.1f} % "
                  f"(seeds {', '.join(f'{100 * x:.1f}' for x in rs)}; acceleration walk {q}, prediction {pred}, "
                  f"pull {lam}, acceleration held {hold})", flush=True)


def main():
    motions = [("pan 4 px/frame", pan(4), 20), ("pan 3 px/frame starts and stops", pan(3, still=40, ramp=15, hold=60), 40)]
    if len(sys.argv) > 1 and sys.argv[1] == "--receding":
        receding_main(motions, int(sys.argv[2]) if len(sys.argv) > 2 else 15)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--scenarios":
        scenarios_main(motions, int(sys.argv[2]) if len(sys.argv) > 2 else 15)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--kalman":
        kalman_main(motions, int(sys.argv[2]) if len(sys.argv) > 2 else 15)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--oracle":
        oracle_main(motions, int(sys.argv[2]) if len(sys.argv) > 2 else 15)
        return
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
