#!/usr/bin/python3
"""Evaluates white-balance estimators on real photographs filmed by a model of the sim camera.

The photographs are the two sets of `Tests/ViewfinderStagesTests/WhiteBalanceTests.swift`
(photographs only, drawings and renders left out), fetched with `apt-get download` into /tmp:
  training: lomiri-wallpapers-16.04 (14), lomiri-wallpapers-20.04 (Kleiber), mate-backgrounds
            (its 12 nature photographs) -- what estimators may be developed and fitted on;
  held-out: plasma-workspace-wallpapers (11) -- only for the final figure;
  others:   16 photographs of other sources and kinds (also never used for fitting): OpenCV's
            samples (Debian's opencv-doc: a street, an aloe, fruit, a mandrill, an office block, a
            football player, an orange, a squirrel, a butterfly, a palace, a plant) and
            scikit-image's (the PyPI wheel: astronaut, cat, coffee, rocket, motorcycle).

The sim camera is reproduced as `SimScene.fromImage` and `SimRenderer` do it (no sensor noise):
a photograph's chroma per luma in its own sRGB encoding (cu = 0.564 (B - Y) 255 / max(Y, 8)
over each 2x2 block, clipped to +-2047; before 3 Dec +-127 at one pixel of the block, which
halved strong colours), luma through the sRGB decode and the 1/2.2 tone curve,
and a light of T K under a balance of B K moving each pixel's chroma by
kappa * (1e6/B - 1e6/T) * Y (`WhiteBalanceModel`, kappa = 0.0006) in the kernel's integer
arithmetic. The loop is the stage's: the estimate is smoothed (speed 0.35) and the sim's
white_balance_temperature (2800..6500 K, steps of 10) follows it.

Estimators:
  current     the stage's WhiteBalanceEstimator (near-neutral, edge-weighted, band-capped mode)
  classic     grey-world, shades-of-grey (p = 1, 2, 6), grey-edge (1st order, p = 1, 6), brightest
              5 %: printed as the error they make on each set at the true light, in mired
  learned     a convolutional filter on the (along-locus, across-locus) chroma histogram (as in
              Barron's convolutional colour constancy, 1-D here: the light only moves chroma along
              the locus), fitted by softmax regression on the training set (6 crops/flips x
              3 random lights 2500..10000 K per photograph)
  generative  the training set's mean scene histogram, blurred, as a log-likelihood

Usage: scripts/wb_eval.py [current|classic|learned|generative|all] [-v] [--others]   (numpy and OpenCV;
--others adds the third set)
Seeded: the same figures on every run.
"""
import os, subprocess, sys
import numpy as np
import cv2

KAPPA = 0.0006
ROOT = "/tmp/viewfinder-wb-{}"
TRAIN = {
    "lomiri-wallpapers-16.04": ["backgrounds/%s.jpg" % n for n in [
        "Bridge_by_Sander_Klootwijk", "Dragonfly_by_Bolly", "Picture_0B_by_freespace", "Picture_1A_by_freespace",
        "Wine_by_Jakkub_Mede", "aitzgorri_by_Aitzol_Berasategi", "analogpattern_by_Peter_Nerlich", "free_by_Peter_Nerlich",
        "friends_by_Aitzol_Berasategi", "greentock_by_Peter_Nerlich", "life_by_Aitzol_Berasategi",
        "picosdeeuropa_by_Aitzol_Berasategi", "seeding_by_Clements_Engelhardt", "sunset_by_Aitzol_Berasategi"]],
    "lomiri-wallpapers-20.04": ["backgrounds/Kleiber_by_Lukas_Baubkus.jpg"],
    "mate-backgrounds": ["backgrounds/mate/nature/%s.jpg" % n for n in [
        "Aqua", "Blinds", "Dune", "FreshFlower", "Garden", "GreenMeadow", "LadyBird", "RainDrops", "Storm", "TwoWings",
        "Wood", "YellowFlower"]],
}
HELD = {
    "plasma-workspace-wallpapers": ["wallpapers/%s/contents/images/2560x1600.jpg" % n for n in [
        "BytheWater", "ColdRipple", "DarkestHour", "EveningGlow", "FallenLeaf", "Grey", "Kite", "OneStandsOut", "Path",
        "summer_1am"]] + ["wallpapers/Volna/contents/images/5120x2880.jpg"],
}


def paths(sources):
    out = []
    for pkg, files in sources.items():
        root = ROOT.format(pkg)
        ps = ["%s/x/usr/share/%s" % (root, f) for f in files]
        if not all(os.path.exists(p) for p in ps):
            subprocess.run("mkdir -p %s && cd %s && apt-get download %s >/dev/null 2>&1 && dpkg -x %s_*.deb x"
                           % (root, root, pkg, pkg), shell=True)
        out += [p for p in ps if os.path.exists(p)]
    return out


OPENCV = ["data/%s.jpg" % n for n in ["leuvenA", "aloeL", "fruits", "baboon", "building", "messi5", "orange",
                                     "squirrel_cls", "butterfly", "home"]] + ["alphamat/input_images/plant.jpg"]
SKIMAGE = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png"]


def other_paths():
    """The third set: OpenCV's sample photographs (opencv-doc) and scikit-image's (its wheel's data)."""
    ps = paths({"opencv-doc": ["doc/opencv-doc/examples/" + f for f in OPENCV]})
    sk = ROOT.format("scikit-image")
    ks = ["%s/skimage/data/%s" % (sk, f) for f in SKIMAGE]
    if not all(os.path.exists(p) for p in ks):
        # The wheel is a zip: only its data folder is taken, nothing is installed.
        subprocess.run("mkdir -p %s && cd %s && python3 -m pip download --no-deps --only-binary=:all: scikit-image -d wheel -q && "
                       "unzip -o -q wheel/scikit_image-*.whl 'skimage/data/*'" % (sk, sk), shell=True)
    return ps + [p for p in ks if os.path.exists(p)]


def short(p):
    return p.split("/wallpapers/")[1].split("/")[0] if "/wallpapers/" in p else os.path.basename(p)


# MARK: the sim camera

LIN = np.array([c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in np.arange(256) / 255.0])


def load(path, w=320, h=180, crop=None, flip=False):
    """The scene: rendered luma (h, w) and the scene's chroma per luma cu, cv (h/2, w/2)."""
    im = cv2.imread(path, cv2.IMREAD_COLOR)
    if crop is not None:
        H, W = im.shape[:2]
        x0, y0, fw, fh = crop
        im = im[int(y0 * H):int((y0 + fh) * H), int(x0 * W):int((x0 + fw) * W)]
    if flip:
        im = im[:, ::-1]
    H, W = im.shape[:2]
    s = max(w / W, h / H)
    cw, ch = int(round(w / s)), int(round(h / s))
    ox, oy = (W - cw) // 2, (H - ch) // 2
    im = cv2.resize(im[oy:oy + ch, ox:ox + cw], (w, h), interpolation=cv2.INTER_AREA).astype(np.float64)
    b, g, r = im[..., 0], im[..., 1], im[..., 2]
    yy = 0.299 * r + 0.587 * g + 0.114 * b
    i0 = np.minimum(254, yy.astype(int))
    fr = yy - i0
    lin = LIN[i0] * (1 - fr) + LIN[i0 + 1] * fr
    yout = np.clip(np.rint(255 * lin ** (1 / 2.2)), 0, 255).astype(np.int64)
    # Each 2x2 block's mean chroma over its mean luma (the scene's Int16 store, +-2047).
    def blocks(a):
        a = np.pad(a, ((0, a.shape[0] % 2), (0, a.shape[1] % 2)), mode="edge")
        return (a[0::2, 0::2] + a[0::2, 1::2] + a[1::2, 0::2] + a[1::2, 1::2]) / 4
    d = np.maximum(blocks(yy), 8)
    cu = np.clip(np.rint(blocks(0.564 * (b - yy)) * 255 / d), -2047, 2047).astype(np.int64)
    cv = np.clip(np.rint(blocks(0.713 * (r - yy)) * 255 / d), -2047, 2047).astype(np.int64)
    return yout, cu, cv


def render(scene, light, balance):
    """A 4:2:2 frame (luma, Cb, Cr) of the scene under `light` K, balanced for `balance` K."""
    yout, cu, cv = scene
    mired = 1e6 / balance - 1e6 / light
    cast_u, cast_v = int(round(KAPPA * mired * 32768)), int(round(-KAPPA * mired * 32768))
    cuf = np.repeat(cu, 2, axis=0)[:yout.shape[0]]
    cvf = np.repeat(cv, 2, axis=0)[:yout.shape[0]]
    ys = yout[:, 0::2] + yout[:, 1::2]
    cb = np.clip(128 + (((cuf * 128 + cast_u) * ys) >> 16), 0, 255)
    cr = np.clip(128 + (((cvf * 128 + cast_v) * ys) >> 16), 0, 255)
    return yout, cb, cr


def samples(frame, step=4, d=2):
    """What WhiteBalanceEstimator reads: every step-th chroma sample, its luma (the pair's mean),
    p (along the locus), q (across), the luma gradient; dark, clipped and border samples left out."""
    Y, cb, cr = frame
    h, w = Y.shape
    yy, xx = np.meshgrid(np.arange(0, cb.shape[0], step), np.arange(0, cb.shape[1], step), indexing="ij")
    x = np.minimum(w - 1, xx * 2)
    ok = (yy >= d) & (yy + d < h) & (x >= d) & (x + d < w)
    y, x, cy, cx = yy[ok], x[ok], yy[ok], xx[ok]
    yv = (Y[y, x] + Y[y, np.minimum(w - 1, x + 1)] + 1) >> 1
    u, v = cb[cy, cx], cr[cy, cx]
    ok = (yv >= 24) & (yv <= 240) & (u > 1) & (u < 254) & (v > 1) & (v < 254)
    g = np.minimum(np.abs(Y[y, x + d] - Y[y, x - d]) + np.abs(Y[y + d, x] - Y[y - d, x]), 64)
    a, b = (u - 128) / np.maximum(yv, 1), (v - 128) / np.maximum(yv, 1)
    return dict(Y=yv[ok], p=((a - b) / 2)[ok], q=((a + b) / 2)[ok], g=g[ok])


def run_loop(scene, light, estimator, frames=12, speed=0.35):
    """The stage's continuous loop driving the sim's white_balance_temperature; the final estimate."""
    balance, target = 5200.0, 1e6 / 5200
    for _ in range(frames):
        r = estimator(render(scene, light, balance), balance)
        if r is not None:
            target += speed * (1e6 / r - target)
        balance = float(min(6500, max(2800, round(1e6 / target / 10) * 10)))
    return 1e6 / target


def evaluate(ps, estimator, label, verbose=False):
    errs, rows = [], []
    for p in ps:
        sc = load(p)
        row = "%-36s" % short(p)
        for T in (3000.0, 6500.0):
            e = run_loop(sc, T, estimator)
            errs.append(abs(e - T) / T)
            row += "  %5.0f K -> %5.0f K (%+6.1f %%)" % (T, e, 100 * (e - T) / T)
        rows.append(row)
    errs = np.array(errs)
    e3, e6 = errs[0::2], errs[1::2]
    print("%-24s %2d photographs: %3.0f %% within 10 %% (3000 K %3.0f %%, 6500 K %3.0f %%), median error %5.1f %% "
          "(3000 K %5.1f %%, 6500 K %5.1f %%), worst %4.0f %%" % (
              label, len(ps), 100 * np.mean(errs < 0.1), 100 * np.mean(e3 < 0.1), 100 * np.mean(e6 < 0.1),
              100 * np.median(errs), 100 * np.median(e3), 100 * np.median(e6), 100 * errs.max()))
    if verbose:
        print("\n".join(rows))


# MARK: the stage's estimator

def current(frame, balance, min_k=2000, max_k=12000, off_locus=0.05, step=4, cap=0.01, gexp=2, yexp=1):
    """WhiteBalanceEstimator.measure as the stage has it; the light, K (None: nothing measurable).
    cap (a luma band's share of the vote), gexp and yexp (the powers of the edge and brightness
    weights) are the stage's constants, parameters here only for the sweep in
    Benchmarks/results/wb-parameter-sweep-2026-11-26.py."""
    BIN, NBINS, ORIG, BANDS, CAP = 0.001, 700, -0.35, 8, cap
    s = samples(frame, step)
    g, Y, p, q = s["g"] - 6, s["Y"], s["p"], s["q"]
    keep = g > 0
    w = np.maximum(g, 0).astype(float) ** gexp * Y.astype(float) ** yexp
    total = w[keep].sum()
    lo = KAPPA * (1e6 / balance - 1e6 / min_k) - 0.01
    hi = KAPPA * (1e6 / balance - 1e6 / max_k) + 0.01
    m = keep & (np.abs(q) <= off_locus) & (p >= lo) & (p <= hi)
    b = np.rint((p - ORIG) / BIN).astype(int)
    m &= (b >= 0) & (b < NBINS)
    H = np.zeros((NBINS, BANDS))
    np.add.at(H, (b[m], np.minimum(BANDS - 1, Y[m] >> 5)), w[m])
    inside = H.sum()
    if total <= 0 or inside <= 0 or inside / total <= 0.002:
        return None
    k = np.array([1, 2, 3, 4, 3, 2, 1.0])
    S = np.stack([np.convolve(H[:, j], k, mode="same") for j in range(BANDS)], 1)
    best = int(np.argmax(np.minimum(S, CAP * inside * 16).sum(1)))
    a, z = max(0, best - 4), min(NBINS, best + 5)
    c = H[a:z].sum(1)
    pe = (c * (ORIG + np.arange(a, z) * BIN)).sum() / c.sum()
    return 1e6 / min(1e6 / min_k, max(1e6 / max_k, 1e6 / balance - pe / KAPPA))


# MARK: classic cues

def classic(ps, label):
    """Each cue's error at the true light (5200 K, balanced), mired along the locus."""
    def to_p(r, g, b):
        y = 0.299 * r + 0.587 * g + 0.114 * b
        return (0.564 * (b - y) - 0.713 * (r - y)) / 2 / y
    rows = []
    for path in ps:
        Y, cb, cr = render(load(path), 5200, 5200)
        Yc = ((Y[:, 0::2] + Y[:, 1::2] + 1) >> 1).astype(float)
        U, V = cb - 128.0, cr - 128.0
        R, G, B = Yc + 1.402 * V, Yc - 0.344136 * U - 0.714136 * V, Yc + 1.772 * U
        ok = (Yc >= 24) & (Yc <= 240)
        out = {}
        for n in (1, 2, 6):
            out["shades-of-grey p=%d" % n] = to_p(*[np.mean(np.clip(c[ok], 0, None) ** n) ** (1 / n) for c in (R, G, B)])
        for n in (1, 6):
            gs = []
            for c in (R, G, B):
                c = cv2.GaussianBlur(c, (0, 0), 1.0)
                gs.append(np.hypot(cv2.Sobel(c, cv2.CV_64F, 1, 0), cv2.Sobel(c, cv2.CV_64F, 0, 1))[ok])
            out["grey-edge p=%d" % n] = to_p(*[np.mean(g ** n) ** (1 / n) for g in gs])
        w = ok & (Yc >= np.percentile(Yc[ok], 95))
        out["brightest 5 %"] = to_p(R[w].mean(), G[w].mean(), B[w].mean())
        rows.append({k: v / KAPPA for k, v in out.items()})
    print("%s: error at the true light, mired (mean, spread, median |error|, share within 15 mired)" % label)
    for k in rows[0]:
        x = np.array([r[k] for r in rows])
        print("  %-20s %+7.1f %6.1f %6.1f %4.0f %%" % (k, x.mean(), x.std(), np.median(np.abs(x)), 100 * np.mean(np.abs(x) < 15)))


# MARK: histogram models (learned, generative)

BW, NB, P0, NF = 0.0025, 384, -0.48, 1024
QE = np.array([-0.12, -0.06, -0.025, 0.025, 0.06, 0.12])
NQ = len(QE) + 1


def hist(s):
    """Histogram of p by band of q, two channels (every sample; edge-weighted), each summing to 1."""
    qb = np.searchsorted(QE, s["q"])
    pb = np.rint((s["p"] - P0) / BW).astype(int)
    ok = (pb >= 0) & (pb < NB)
    H = np.zeros((2, NQ, NB))
    for c, w in enumerate((np.ones_like(s["p"]), np.maximum(s["g"] - 6, 0).astype(float) ** 2)):
        np.add.at(H[c], (qb[ok], pb[ok]), w[ok])
        if H[c].sum() > 0:
            H[c] /= H[c].sum()
    return H


def filter_estimator(F):
    def est(frame, balance, min_k=2000, max_k=12000):
        H = hist(samples(frame))
        if H.sum() == 0:
            return None
        sc = np.fft.irfft((np.conj(np.fft.rfft(F, NF, axis=-1)) * np.fft.rfft(H, NF, axis=-1)).sum(axis=(0, 1)), NF)
        mlo, mhi = 1e6 / max_k, 1e6 / min_k
        ss = np.arange(int(np.ceil(KAPPA * (1e6 / balance - mhi) / BW)), int(np.floor(KAPPA * (1e6 / balance - mlo) / BW)) + 1)
        v = sc[np.mod(ss, NF)]
        i = int(np.argmax(v))
        s = float(ss[i])
        if 0 < i < len(v) - 1 and v[i - 1] - 2 * v[i] + v[i + 1] < 0:
            s += 0.5 * (v[i - 1] - v[i + 1]) / (v[i - 1] - 2 * v[i] + v[i + 1])
        return 1e6 / min(mhi, max(mlo, 1e6 / balance - s * BW / KAPPA))
    return est


def augmented(ps, rng, naug=6, lights=3):
    Hs, ts = [], []
    for p in ps:
        for a in range(naug):
            crop = None
            if a:
                fw, fh = rng.uniform(0.5, 1), rng.uniform(0.5, 1)
                crop = (rng.uniform(0, 1 - fw), rng.uniform(0, 1 - fh), fw, fh)
            sc = load(p, crop=crop, flip=bool(a % 2))
            for _ in range(lights):
                T, B = 1e6 / rng.uniform(100, 400), rng.uniform(2800, 6500)
                Hs.append(hist(samples(render(sc, T, B))))
                ts.append(KAPPA * (1e6 / B - 1e6 / T) / BW)
    return np.array(Hs), np.array(ts)


def fit(Hs, ts, smax=100, iters=300, lr=1.0, smooth=1e-5, l2=1e-3):
    """score(s) = sum_k F[k] H[k + s]; softmax over shifts -smax..smax against the true shift
    (split between its two neighbours); Adam on cross-entropy + smoothness + L2."""
    n = len(Hs)
    F = np.zeros(Hs.shape[1:])
    shifts = np.arange(-smax, smax + 1)
    idx = np.mod(shifts, NF)
    lo = np.floor(ts).astype(int)
    fr = ts - lo
    T = np.zeros((n, len(shifts)))
    T[np.arange(n), lo + smax] = 1 - fr
    T[np.arange(n), np.minimum(lo + 1 + smax, 2 * smax)] += fr
    Bf = np.fft.rfft(Hs, NF, axis=-1)
    m1, m2 = np.zeros_like(F), np.zeros_like(F)
    for it in range(iters):
        sc = np.fft.irfft((np.conj(np.fft.rfft(F, NF, axis=-1))[None] * Bf).sum(axis=(1, 2)), NF)[:, idx]
        P = np.exp(sc - sc.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        Gf = np.zeros((n, NF))
        Gf[:, idx] = (P - T) / n
        grad = np.fft.irfft((np.conj(np.fft.rfft(Gf, NF))[:, None, None, :] * Bf).sum(axis=0), NF)[..., :NB]
        dd = np.diff(F, axis=-1)
        gs = np.zeros_like(F)
        gs[..., :-1] -= 2 * dd
        gs[..., 1:] += 2 * dd
        grad += smooth * gs + 2 * l2 * F
        m1 = 0.9 * m1 + 0.1 * grad
        m2 = 0.999 * m2 + 0.001 * grad ** 2
        F -= lr * (m1 / (1 - 0.9 ** (it + 1))) / (np.sqrt(m2 / (1 - 0.999 ** (it + 1))) + 1e-8)
    return F


def generative(ps, rng, sigma=2, eps=1e-4):
    Hs = []
    for p in ps:
        for a in range(6):
            crop = None
            if a:
                fw, fh = rng.uniform(0.5, 1), rng.uniform(0.5, 1)
                crop = (rng.uniform(0, 1 - fw), rng.uniform(0, 1 - fh), fw, fh)
            Hs.append(hist(samples(render(load(p, crop=crop, flip=bool(a % 2)), 5200, 5200))))
    M = np.mean(Hs, axis=0)
    k = np.exp(-0.5 * (np.arange(-3 * sigma, 3 * sigma + 1) / sigma) ** 2)
    k /= k.sum()
    return np.log(np.apply_along_axis(lambda r: np.convolve(r, k, mode="same"), -1, M) + eps)


def main():
    what = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "all"
    verbose = "-v" in sys.argv
    tr, ho = paths(TRAIN), paths(HELD)
    ot = other_paths() if "--others" in sys.argv else []
    if not tr or not ho:
        sys.exit("wb_eval: the photographs could not be fetched (apt-get download)")
    if what in ("current", "all"):
        evaluate(tr, current, "current, training", verbose)
        evaluate(ho, current, "current, held-out", verbose)
        if ot: evaluate(ot, current, "current, other sources", verbose)
    if what in ("classic", "all"):
        classic(tr, "classic cues, training")
        classic(ho, "classic cues, held-out")
        if ot: classic(ot, "classic cues, other sources")
    if what in ("learned", "all"):
        F = fit(*augmented(tr, np.random.default_rng(1)))
        evaluate(tr, filter_estimator(F), "learned, training", verbose)
        evaluate(ho, filter_estimator(F), "learned, held-out", verbose)
        if ot: evaluate(ot, filter_estimator(F), "learned, other sources", verbose)
    if what in ("generative", "all"):
        F = generative(tr, np.random.default_rng(2))
        evaluate(tr, filter_estimator(F), "generative, training", verbose)
        evaluate(ho, filter_estimator(F), "generative, held-out", verbose)
        if ot: evaluate(ot, filter_estimator(F), "generative, other sources", verbose)


if __name__ == "__main__":
    main()
