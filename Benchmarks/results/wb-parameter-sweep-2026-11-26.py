import sys; import os; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import numpy as np
from wb_eval import *
def est(frame, balance, off_locus=0.05, CAP=0.01, gexp=2, yexp=1, kern=(1,2,3,4,3,2,1.0), min_k=2000, max_k=12000, step=4):
    BIN, NBINS, ORIG, BANDS = 0.001, 700, -0.35, 8
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
    k = np.array(kern)
    S = np.stack([np.convolve(H[:, j], k, mode="same") for j in range(BANDS)], 1)
    best = int(np.argmax(np.minimum(S, CAP * inside * 16).sum(1)))
    a, z = max(0, best - 4), min(NBINS, best + 5)
    c = H[a:z].sum(1)
    pe = (c * (ORIG + np.arange(a, z) * BIN)).sum() / c.sum()
    return 1e6 / min(1e6 / min_k, max(1e6 / max_k, 1e6 / balance - pe / KAPPA))
sets = dict(tr=paths(TRAIN), ho=paths(HELD), ot=other_paths())
scenes = {k: [load(p) for p in v] for k, v in sets.items()}
frames = {k: [(render(sc, T, 5200.0), T) for sc in v for T in (3000.0, 6500.0)] for k, v in scenes.items()}
def score(**kw):
    out = []
    for k in ("tr", "ho", "ot"):
        e = []
        for fr, T in frames[k]:
            r = est(fr, 5200.0, **kw)
            r = 5200.0 if r is None else r
            e.append(abs(r - T) / T)
        out.append("%s %3.0f%%/%4.1f" % (k, 100*np.mean(np.array(e) < 0.1), 100*np.median(e)))
    print("%-50s" % str(kw), "  ".join(out), flush=True)
score()
for ol in (0.02, 0.03, 0.08): score(off_locus=ol)
for cap in (0.003, 0.03, 1.0): score(CAP=cap)
for ge in (0, 1, 3): score(gexp=ge)
for ye in (0, 2): score(yexp=ye)
