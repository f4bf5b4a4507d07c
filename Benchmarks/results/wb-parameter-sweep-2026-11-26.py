#!/usr/bin/python3
"""The stage's white-balance estimator (scripts/wb_eval.py's port) with one parameter changed at a
time, one frame per (photograph, light) at a 5200 K balance, on the three photograph sets.
Output: wb-parameter-sweep-2026-11-26.txt. Usage: /usr/bin/python3 Benchmarks/results/wb-parameter-sweep-2026-11-26.py"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import numpy as np
from wb_eval import TRAIN, HELD, paths, other_paths, load, render, current

sets = dict(tr=paths(TRAIN), ho=paths(HELD), ot=other_paths())
frames = {k: [(render(sc, T, 5200.0), T) for sc in map(load, v) for T in (3000.0, 6500.0)] for k, v in sets.items()}


def score(**kw):
    out = []
    for k in ("tr", "ho", "ot"):
        e = []
        for fr, T in frames[k]:
            r = current(fr, 5200.0, **kw)
            e.append(abs((5200.0 if r is None else r) - T) / T)
        out.append("%s %3.0f%%/%4.1f" % (k, 100 * np.mean(np.array(e) < 0.1), 100 * np.median(e)))
    print("%-50s" % str(kw), "  ".join(out), flush=True)


score()
for v in (0.02, 0.03, 0.08): score(off_locus=v)
for v in (0.003, 0.03, 1.0): score(cap=v)
for v in (0, 1, 3): score(gexp=v)
for v in (0, 2): score(yexp=v)
