# A low-parameter learned white-balance estimator from simple cues (in the spirit of Cheng, Price,
# Cohen & Brown, CVPR 2015), scored with leave-one-SOURCE-out cross-validation against the stage's
# estimator (`current` of scripts/wb_eval.py), both in the same closed loop (wb_eval.run_loop).
#
# Each frame gives a handful of cue estimates of the light, each as an offset along the locus in
# mired (d = 1e6/balance - 1e6/light; the light moves every sample's p by KAPPA * d):
#   cur   the stage's near-neutral mode (wb_eval.current; where it measures nothing: the grey-world cue)
#   gw    grey-world (shades-of-grey p = 1 on the frame's RGB), sog2, sog6 (p = 2, 6)
#   ge1   grey-edge (1st order, p = 1), ge6 (p = 6)
#   wp    white patch (the brightest 5 %)
#   med   the median p of the stage's samples;  ew: their edge- and luma-weighted mean p
# and shift-invariant confidence features: the share of (edge-weighted) samples near the locus
# (|q| <= 0.05), the spread of p and of q, mean luma, and whether `cur` measured nothing.
# Models (their choices picked by an inner leave-one-source-out on the training sources only, scored
# one-shot at the true light, never on the outer test source):
#   ridge    d = cur + sum_i w_i (cue_i - cur) + b     (weights of the cues sum to 1: shift-equivariant)
#   gate     cur where the near-locus share >= tau, the ridge elsewhere
#   inter    the ridge with each (cue_i - cur) also multiplied by the (centred) near-locus share
#   ridgeq, gateq  the same plus the shift-invariant features (confidence, the cues' places across the locus)
#   trees    15 bagged regression trees (depth 1-3) on the same, predicting d - cur (clipped to +-80 mired)
# with squared or Huber (delta 15 mired) loss and ridge lambda in a grid.
#
# Photographs: scripts/wb_eval.py's three sets plus more real photographs from Debian packages
# (kphotoalbum's demo album, palapeli-data's puzzle photographs, python3-sklearn's and
# python-matplotlib-data's sample photographs), fetched with apt-get download + dpkg -x into /tmp.
#
# /usr/bin/python3 Benchmarks/results/wb-simple-features-2026-12-02.py > Benchmarks/results/wb-simple-features-2026-12-02.txt
# Seeded; numpy + OpenCV only.
import os, sys, time
import numpy as np
import cv2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import wb_eval as W

KAPPA = W.KAPPA
cv2.setNumThreads(1)

# MARK: photographs by source

KPA = ["anne_helene", "bar55", "bar55_2", "blackie", "cold_water", "donna", "donna_2", "grand_canyon_1",
       "grand_canyon_2", "grand_canyon_3", "jesper", "jesper_2", "new_wave_1", "new_wave_2", "pool", "pool_2",
       "qt-logo", "skagen", "skagen_2", "snow", "spiff", "spiff_2", "sunset", "wayne"]
PALAPELI = ["castle-maintenon", "cincinnati-bridge", "citrus-fruits", "european-honey-bee", "panther-chameleon-female"]


def sources():
    ot = W.other_paths()
    s = {
        "lomiri": W.paths({k: W.TRAIN[k] for k in ("lomiri-wallpapers-16.04", "lomiri-wallpapers-20.04")}),
        "mate": W.paths({"mate-backgrounds": W.TRAIN["mate-backgrounds"]}),
        "plasma": W.paths(W.HELD),
        "opencv": [p for p in ot if "opencv-doc" in p],
        "skimage": [p for p in ot if "scikit-image" in p],
        "kphotoalbum": W.paths({"kphotoalbum": ["kphotoalbum/demo/%s.jpg" % n for n in KPA]}),
        "palapeli": W.paths({"palapeli-data": ["palapeli/collection/%s.jpg" % n for n in PALAPELI]}),
        # paths() roots files at usr/share; sklearn's sit under usr/lib
        "sklearn+matplotlib": W.paths({"python3-sklearn": ["../lib/python3/dist-packages/sklearn/datasets/images/%s.jpg" % n
                                                           for n in ("china", "flower")]})
                              + W.paths({"python-matplotlib-data": ["matplotlib/mpl-data/sample_data/grace_hopper.jpg"]}),
    }
    return s


# MARK: cues and features

CUES = ["cur", "gw", "sog2", "sog6", "ge1", "ge6", "wp", "med", "ew"]
CONF = ["share", "sp", "sq", "ymean", "none"]
QF = ["gwq", "sog6q", "ge1q", "wpq", "medq"]


def to_p(r, g, b):
    y = 0.299 * r + 0.587 * g + 0.114 * b
    return (0.564 * (b - y) - 0.713 * (r - y)) / 2 / max(y, 1e-6)


def to_q(r, g, b):
    """Across the locus: the light does not move it."""
    y = 0.299 * r + 0.587 * g + 0.114 * b
    return (0.564 * (b - y) + 0.713 * (r - y)) / 2 / max(y, 1e-6)


def features(frame, balance):
    """Cue offsets (mired) and confidence features of one frame."""
    s = W.samples(frame)
    Y, cb, cr = frame
    Yc = ((Y[:, 0::2] + Y[:, 1::2] + 1) >> 1).astype(np.float32)
    U, V = (cb - 128.0).astype(np.float32), (cr - 128.0).astype(np.float32)
    R, G, B = Yc + 1.402 * V, Yc - 0.344136 * U - 0.714136 * V, Yc + 1.772 * U
    ok = (Yc >= 24) & (Yc <= 240)
    f = {}
    if ok.sum() < 50 or len(s["p"]) < 20:
        return None
    for n in (1, 2, 6):
        rgb = [np.mean(np.clip(c[ok], 0, None).astype(np.float64) ** n) ** (1 / n) for c in (R, G, B)]
        f["gw" if n == 1 else "sog%d" % n] = to_p(*rgb) / KAPPA
        f["gwq" if n == 1 else "sog%dq" % n] = to_q(*rgb) * 10
    gs = []
    for c in (R, G, B):
        c = cv2.GaussianBlur(c, (0, 0), 1.0)
        gs.append(np.hypot(cv2.Sobel(c, cv2.CV_32F, 1, 0), cv2.Sobel(c, cv2.CV_32F, 0, 1))[ok].astype(np.float64))
    for n in (1, 6):
        rgb = [np.mean(g ** n) ** (1 / n) for g in gs]
        f["ge%d" % n] = to_p(*rgb) / KAPPA
        f["ge%dq" % n] = to_q(*rgb) * 10
    w = ok & (Yc >= np.percentile(Yc[ok], 95))
    f["wp"] = to_p(R[w].mean(), G[w].mean(), B[w].mean()) / KAPPA
    f["wpq"] = to_q(R[w].mean(), G[w].mean(), B[w].mean()) * 10
    p, q, g, y = s["p"], s["q"], s["g"], s["Y"].astype(float)
    f["med"] = np.median(p) / KAPPA
    f["medq"] = np.median(q) * 10
    we = np.maximum(g - 6, 0).astype(float) ** 2 * y
    f["ew"] = (we * p).sum() / we.sum() / KAPPA if we.sum() > 0 else f["med"]
    c = W.current(frame, balance)
    f["none"] = float(c is None)
    f["cur"] = f["gw"] if c is None else 1e6 / balance - 1e6 / c
    wn = we if we.sum() > 0 else np.ones_like(p)
    f["share"] = (wn * (np.abs(q) <= 0.05)).sum() / wn.sum()
    f["sp"] = np.std(p) / KAPPA / 100
    f["sq"] = np.std(q) * 10
    f["ymean"] = y.mean() / 255
    return f


def vec(f):
    return np.array([f[k] for k in CUES + CONF + QF])


NC = len(CUES)
SHARE = NC + CONF.index("share")


# MARK: models: predict d (mired) from a feature row x

def design(X, kind, mu_share):
    cur = X[:, 0:1]
    D = X[:, 1:NC] - cur                                  # cue - cur: shift-invariant
    if kind == "inter":
        D = np.hstack([D, D * (X[:, SHARE:SHARE + 1] - mu_share)])
    if kind.endswith("q"):                                # shift-invariant: the cues' place across the locus
        D = np.hstack([D, X[:, NC:NC + len(CONF)], X[:, NC + len(CONF):]])
    return D, cur[:, 0]


def tree(Z, t, depth, minleaf, rng, nthr=8):
    """A small regression tree (nested tuples): splits at quantiles, least squares, leaves the median."""
    if depth == 0 or len(t) < 2 * minleaf:
        return float(np.median(t))
    best = None
    for j in rng.choice(Z.shape[1], max(1, Z.shape[1] // 2), replace=False):
        for th in np.unique(np.quantile(Z[:, j], np.linspace(0.1, 0.9, nthr))):
            L = Z[:, j] <= th
            if minleaf <= L.sum() <= len(t) - minleaf:
                c = t[L].var() * L.sum() + t[~L].var() * (~L).sum()
                if best is None or c < best[0]:
                    best = (c, j, th, L)
    if best is None:
        return float(np.median(t))
    _, j, th, L = best
    return (j, th, tree(Z[L], t[L], depth - 1, minleaf, rng), tree(Z[~L], t[~L], depth - 1, minleaf, rng))


def tree_predict(n, Z):
    if not isinstance(n, tuple):
        return np.full(len(Z), n)
    j, th, a, b = n
    L = Z[:, j] <= th
    out = np.empty(len(Z))
    out[L], out[~L] = tree_predict(a, Z[L]), tree_predict(b, Z[~L])
    return out


def fit(X, d, kind="ridge", lam=1.0, loss="sq", tau=None):
    if kind == "trees":                                   # lam: depth; bagged over photographs' rows, 15 trees
        rng = np.random.default_rng(7)
        D, cur = design(X, "ridgeq", 0.0)
        t = np.clip(d - cur, -80, 80)
        ts = []
        for _ in range(15):
            i = rng.integers(0, len(t), len(t))
            ts.append(tree(D[i], t[i], int(lam), 40, rng))
        return dict(kind=kind, trees=ts, mu_share=0.0, tau=None)
    """Weights of `d - cur ~ D w + b`, ridge (lam, on standardised columns), squared or Huber loss (IRLS).
    gate: fitted on the rows below tau only; the rows at or above tau use cur."""
    mu_share = X[:, SHARE].mean()
    rows = np.ones(len(X), bool) if not kind.startswith("gate") else X[:, SHARE] < tau
    if rows.sum() < 10:
        rows[:] = True
    D, cur = design(X[rows], kind.replace("gate", "ridge"), mu_share)
    t = d[rows] - cur
    sd = D.std(0) + 1e-9
    Z = np.hstack([D / sd, np.ones((len(D), 1))])
    r = np.ones(len(Z))
    for _ in range(20 if loss == "huber" else 1):
        A = Z.T @ (Z * r[:, None]) + lam * len(Z) * np.diag(np.r_[np.ones(Z.shape[1] - 1), 0])
        beta = np.linalg.solve(A, Z.T @ (r * t))
        if loss == "huber":
            e = np.abs(t - Z @ beta)
            r = np.where(e <= 15, 1.0, 15 / np.maximum(e, 1e-9))
    return dict(kind=kind, w=beta[:-1] / sd, b=beta[-1], mu_share=mu_share, tau=tau)


def predict(m, X):
    if m["kind"] == "trees":
        D, cur = design(X, "ridgeq", 0.0)
        return cur + np.mean([tree_predict(n, D) for n in m["trees"]], axis=0)
    D, cur = design(X, m["kind"].replace("gate", "ridge"), m["mu_share"])
    out = cur + D @ m["w"] + m["b"]
    if m["kind"].startswith("gate"):
        out = np.where(X[:, SHARE] >= m["tau"], cur, out)
    return out


def estimator(m):
    def est(frame, balance, min_k=2000, max_k=12000):
        f = features(frame, balance)
        if f is None:
            return None
        d = float(predict(m, vec(f)[None])[0])
        return 1e6 / min(1e6 / min_k, max(1e6 / max_k, 1e6 / balance - d))
    return est


# MARK: data

def training_rows(ps, rng, views=3, lights=4):
    """Rows (features) and targets d of crops/flips of each photograph under random lights and balances."""
    X, d, who = [], [], []
    for i, p in enumerate(ps):
        for a in range(views):
            crop = None
            if a:
                fw, fh = rng.uniform(0.6, 1), rng.uniform(0.6, 1)
                crop = (rng.uniform(0, 1 - fw), rng.uniform(0, 1 - fh), fw, fh)
            sc = W.load(p, crop=crop, flip=bool(a % 2))
            for k in range(lights):
                # half at a random balance, half near where the loop settles (the balance the light's, +-20 mired)
                T = 1e6 / rng.uniform(100, 400)
                B = rng.uniform(2800, 6500) if k % 2 else min(6500, max(2800, 1e6 / (1e6 / T + rng.normal(0, 20))))
                f = features(W.render(sc, T, B), B)
                if f is not None:
                    X.append(vec(f)); d.append(1e6 / B - 1e6 / T); who.append(i)
    return np.array(X), np.array(d), np.array(who)


def static_rows(ps):
    """One-shot rows at the evaluation lights with the balance the loop would settle at (proxy score)."""
    X, d, T = [], [], []
    for p in ps:
        sc = W.load(p)
        for t in (3000.0, 6500.0):
            B = min(6500.0, max(2800.0, t))
            f = features(W.render(sc, t, B), B)
            X.append(vec(f)); d.append(1e6 / B - 1e6 / t); T.append(t)
    return np.array(X), np.array(d), np.array(T)


def static_score(dpred, d, T):
    """Within-10 % share and median error of one-shot estimates (balance B, light T)."""
    B = np.clip(T, 2800, 6500)
    est = 1e6 / np.clip(1e6 / B - dpred, 1e6 / 12000, 1e6 / 2000)
    e = np.abs(est - T) / T
    return np.mean(e < 0.1), np.median(e)


GRID = ([(k, lam, loss, None) for k in ("ridge", "ridgeq") for lam in (0.001, 0.01, 0.1, 1.0) for loss in ("sq", "huber")]
        + [("inter", lam, loss, None) for lam in (0.01, 0.1, 1.0) for loss in ("sq", "huber")]
        + [(k, lam, "huber", tau) for k in ("gate", "gateq") for lam in (0.01, 0.1, 1.0) for tau in (0.3, 0.5, 0.7)]
        + [("trees", depth, "clip80", None) for depth in (1, 2, 3)])


def select(srcs, TR, ST):
    """The design with the best inner leave-one-source-out one-shot score on `srcs` only."""
    best, rows = None, []
    for g in GRID:
        hits, errs = [], []
        for s in srcs:
            X = np.vstack([TR[o][0] for o in srcs if o != s]); d = np.concatenate([TR[o][1] for o in srcs if o != s])
            m = fit(X, d, *g)
            Xs, ds, Ts = ST[s]
            B = np.clip(Ts, 2800, 6500)
            est = 1e6 / np.clip(1e6 / B - predict(m, Xs), 1e6 / 12000, 1e6 / 2000)
            e = np.abs(est - Ts) / Ts
            hits += list(e < 0.1); errs += list(e)
        sc = (np.mean(hits), -np.median(errs))
        rows.append((g, sc))
        if best is None or sc > best[1]:
            best = (g, sc)
    return best, rows


def main():
    t0 = time.time()
    S = sources()
    names = list(S)
    print("photograph sources:", ", ".join("%s %d" % (k, len(v)) for k, v in S.items()), "; total", sum(map(len, S.values())))
    rng = np.random.default_rng(20261202)
    TR = {k: training_rows(S[k], rng)[:2] for k in names}
    ST = {k: static_rows(S[k]) for k in names}
    print("features: %d training rows, %.0f s" % (sum(len(v[1]) for v in TR.values()), time.time() - t0))

    # one-shot error of each cue at the true light (mired), all photographs
    Xa = np.vstack([ST[k][0] for k in names]); da = np.concatenate([ST[k][1] for k in names])
    print("\none-shot cue error at the true light, mired (median |error|, share within 15 mired), all %d photographs:" % (len(da) // 2))
    for i, c in enumerate(CUES):
        e = Xa[0::2, i] - da[0::2]
        print("  %-5s %6.1f %4.0f %%" % (c, np.median(np.abs(e)), 100 * np.mean(np.abs(e) < 15)))

    print("\nleave-one-source-out, closed loop (run_loop), lights 3000 K and 6500 K; design picked by an inner LOSO:")
    print("%-20s %3s  %-26s %-26s %s" % ("source", "n", "current: within 10 %, med", "learned: within 10 %, med", "design"))
    allc, alll = [], []
    for s in names:
        inner = [o for o in names if o != s]
        (g, sc), _ = select(inner, TR, ST)
        X = np.vstack([TR[o][0] for o in inner]); d = np.concatenate([TR[o][1] for o in inner])
        m = fit(X, d, *g)
        ec, el = [], []
        for p in S[s]:
            sc_ = W.load(p)
            for T in (3000.0, 6500.0):
                ec.append(abs(W.run_loop(sc_, T, W.current) - T) / T)
                el.append(abs(W.run_loop(sc_, T, estimator(m)) - T) / T)
        ec, el = np.array(ec), np.array(el)
        allc += list(ec); alll += list(el)
        print("%-20s %3d  %5.0f %%  %6.1f %%          %5.0f %%  %6.1f %%          %s %s" % (
            s, len(S[s]), 100 * np.mean(ec < 0.1), 100 * np.median(ec), 100 * np.mean(el < 0.1), 100 * np.median(el),
            g, "(inner %.0f %%)" % (100 * sc[0])))
        sys.stdout.flush()
    allc, alll = np.array(allc), np.array(alll)
    print("%-20s %3d  %5.0f %%  %6.1f %%          %5.0f %%  %6.1f %%" % (
        "all", len(allc) // 2, 100 * np.mean(allc < 0.1), 100 * np.median(allc), 100 * np.mean(alll < 0.1), 100 * np.median(alll)))
    for j, T in enumerate((3000, 6500)):
        print("  at %d K: current %.0f %% (median %.1f %%), learned %.0f %% (median %.1f %%)" % (
            T, 100 * np.mean(allc[j::2] < 0.1), 100 * np.median(allc[j::2]), 100 * np.mean(alll[j::2] < 0.1), 100 * np.median(alll[j::2])))
    both = (allc < 0.1) & (alll < 0.1)
    print("  pairs: both within %d, only current %d, only learned %d, neither %d (of %d)" % (
        both.sum(), ((allc < 0.1) & ~(alll < 0.1)).sum(), (~(allc < 0.1) & (alll < 0.1)).sum(),
        (~(allc < 0.1) & ~(alll < 0.1)).sum(), len(allc)))

    # final: the design picked by LOSO over all sources, fitted on all
    (g, sc), rows = select(names, TR, ST)
    print("\ninner-LOSO one-shot score of each design over all sources (within 10 %, median error):")
    for gg, ss in rows:
        print("  %-34s %4.0f %%  %5.1f %%" % (gg, 100 * ss[0], -100 * ss[1]))
    cur_st = static_score(Xa[:, 0], da, np.concatenate([ST[k][2] for k in names]))
    print("  (current one-shot: %.0f %%, %.1f %%)" % (100 * cur_st[0], 100 * cur_st[1]))
    X = np.vstack([TR[o][0] for o in names]); d = np.concatenate([TR[o][1] for o in names])
    m = fit(X, d, *g)
    print("  in-sample (fitted and scored on all), one-shot: %.0f %%, %.1f %% (capacity check, not a generalisation figure)"
          % tuple(100 * np.array(static_score(predict(m, Xa), da, np.concatenate([ST[k][2] for k in names])))))
    print("\nfinal design %s, fitted on all %d rows:" % (g, len(d)))
    if m["kind"] == "trees":
        print("  15 bagged trees on (cue - cur) and the invariants; first:", m["trees"][0])
        m = fit(X, d, "ridgeq", 0.1, "sq")
        print("  (for reference, ridgeq 0.1 sq fitted on all:)")
    labels = ["%s-cur" % c for c in CUES[1:]]
    if m["kind"] == "inter":
        labels += ["(%s-cur)*(share-%.4f)" % (c, m["mu_share"]) for c in CUES[1:]]
    if m["kind"].endswith("q"):
        labels += CONF + QF
    print("  d = cur + %.3f" % m["b"] + "".join("\n      %+.5f * %s" % (w, l) for w, l in zip(m["w"], labels)))
    if m["kind"].startswith("gate"):
        print("  where share < %.2f; d = cur where share >= %.2f" % (m["tau"], m["tau"]))
    print("  (weights of the cues: cur %.4f, %s)" % (1 - m["w"][:NC - 1].sum(), ", ".join(
        "%s %.4f" % (c, w) for c, w in zip(CUES[1:], m["w"][:NC - 1]))))
    print("\n%.0f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
