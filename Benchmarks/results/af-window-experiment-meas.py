import numpy as np
W, H = 960, 540
def frames(path):
    b = open(path, 'rb').read()
    i = b.index(b'\n') + 1
    out = []
    while i < len(b):
        j = b.index(b'\n', i) + 1
        out.append(np.frombuffer(b, np.uint8, W*H, j).reshape(H, W).astype(np.float64))
        i = j + W*H
    return out
def ten(w):
    gx = (w[:-2, 2:] + 2*w[1:-1, 2:] + w[2:, 2:]) - (w[:-2, :-2] + 2*w[1:-1, :-2] + w[2:, :-2])
    gy = (w[2:, :-2] + 2*w[2:, 1:-1] + w[2:, 2:]) - (w[:-2, :-2] + 2*w[:-2, 1:-1] + w[:-2, 2:])
    return np.mean(gx*gx + gy*gy)
def half(w):
    h, ww = w.shape[0]//2*2, w.shape[1]//2*2
    w = w[:h, :ww]
    return (w[0::2, 0::2] + w[1::2, 0::2] + w[0::2, 1::2] + w[1::2, 1::2]) / 4
def box(w, r):
    out = np.zeros_like(w)
    for k in range(-r, r+1): out += np.roll(w, k, 1)
    o2 = np.zeros_like(w)
    for k in range(-r, r+1): o2 += np.roll(out, k, 0)
    return o2 / (2*r+1)**2
def measures(img):
    h, w = int(H*0.3), int(W*0.3)
    y0, x0 = (H-h)//2, (W-w)//2
    win = img[y0:y0+h, x0:x0+w]
    m2 = win.mean()**2
    hw = half(win); qw = half(hw)
    b1 = box(win, 1)[3:-3, 3:-3]; b3 = box(win, 3)[3:-3, 3:-3]
    return {'tenengrad': ten(win)/m2, 'T of 1/2': ten(hw)/m2, 'T of 1/4': ten(qw)/m2,
            'DoG box1-box3': np.mean((b1-b3)**2)/m2}
lens = [400, 420, 440, 470, 500, 550]
res = {L: [measures(f) for f in frames(f's{L}.y4m')] for L in lens}
for k in res[400][0]:
    print(k)
    base = np.mean([m[k] for m in res[400][20:]])
    for L in lens:
        v = np.array([m[k] for m in res[L]]) / base
        print(f"   lens {L} (error {(L-400)/10:.0f} %): frames 0-19 {v[:20].min():.3f}-{v[:20].max():.3f}, frames 20-39 mean {v[20:].mean():.3f} spread {v[20:].min():.3f}-{v[20:].max():.3f}")
