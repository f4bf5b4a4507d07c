# Does the learned chroma-histogram filter of scripts/wb_eval.py generalise with more photographs?
# Trains on two of the three sets (training 27, held-out 11, others 16) and tests on the third.
# /usr/bin/python3 Benchmarks/results/wb-learned-more-data-2026-11-26.py  (about 2 minutes; output: the .txt beside it)
import os, sys, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import wb_eval as W
tr, ho, ot = W.paths(W.TRAIN), W.paths(W.HELD), W.other_paths()
print(len(tr), len(ho), len(ot))
sets = {"training": tr, "held-out": ho, "others": ot}
for test in ["held-out", "others"]:
    train = [p for k, v in sets.items() if k != test for p in v]
    F = W.fit(*W.augmented(train, np.random.default_rng(1)))
    W.evaluate(sets[test], W.filter_estimator(F), "learned on %d, %s" % (len(train), test))
    W.evaluate(train, W.filter_estimator(F), "learned on %d, its own" % len(train))
