import numpy as np
# Run from a folder holding s400.y4m … s550.y4m (see docs/stabilisation-autofocus-log.md, autofocus).
exec(open(__file__.replace('af-window-experiment.py', 'af-window-experiment-meas.py')).read().split('lens = [')[0])
def sob2(w):
    gx = (w[:-2, 2:] + 2*w[1:-1, 2:] + w[2:, 2:]) - (w[:-2, :-2] + 2*w[1:-1, :-2] + w[2:, :-2])
    gy = (w[2:, :-2] + 2*w[2:, 1:-1] + w[2:, 2:]) - (w[:-2, :-2] + 2*w[:-2, 1:-1] + w[:-2, 2:])
    return gx*gx + gy*gy
h, w = int(H*0.3), int(W*0.3); y0, x0 = (H-h)//2, (W-w)//2
def hannw(n): return np.sin(np.pi*(np.arange(n)+0.5)/n)**2
def m(img):
    win = img[y0:y0+h, x0:x0+w]; g = sob2(win); m2 = win.mean()**2
    wy, wx = hannw(g.shape[0]), hannw(g.shape[1]); Wt = np.outer(wy, wx)
    # tapered over a larger window (1.5x), so the centre region keeps full weight
    H2, W2 = int(h*1.5), int(w*1.5); ya, xa = (H-H2)//2, (W-W2)//2
    win2 = img[ya:ya+H2, xa:xa+W2]; g2 = sob2(win2); Wt2 = np.outer(hannw(g2.shape[0]), hannw(g2.shape[1]))
    mw2 = (np.sum(Wt2*win2[1:-1,1:-1])/Wt2.sum())**2
    return {'hard window': g.mean()/m2, 'Hann window': np.sum(Wt*g)/Wt.sum()/m2, 'Hann 1.5x': np.sum(Wt2*g2)/Wt2.sum()/mw2}
lens = [400, 420, 440, 470, 500, 550]
res = {L: [m(f) for f in frames(f's{L}.y4m')] for L in lens}
for k in res[400][0]:
    base = np.mean([r[k] for r in res[400]])
    v0 = np.array([r[k] for r in res[400]]) / base
    print(f"{k}: lens 400 over 40 frames {v0.min():.3f}-{v0.max():.3f} (std {v0.std()*100:.1f} %)")
    for L in lens[1:]:
        v = np.array([r[k] for r in res[L]]) / base
        print(f"   lens {L} ({(L-400)/10:.0f} %): mean {v.mean():.3f}; same-frame ratio to lens 400 {np.mean(v/v0):.3f}")
