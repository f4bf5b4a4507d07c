"""Frame -> BGR: OpenCV when it is installed (fast, and it decodes MJPEG), else NumPy."""

import numpy as np

try:  # OpenCV is optional
    import cv2
except Exception:  # pragma: no cover - not installed, or broken (an ABI mismatch with NumPy)
    cv2 = None


# V4L2's Bayer orders (the first two rows' first two pixels) and OpenCV's names for them (OpenCV
# names a pattern by the second row's second and third pixels: RGGB is its "BG").
_BAYER_OPENCV = {"srggb8": "COLOR_BayerBG2BGR", "sbggr8": "COLOR_BayerRG2BGR",
                 "sgbrg8": "COLOR_BayerGR2BGR", "sgrbg8": "COLOR_BayerGB2BGR"}
# Where R, G (two) and B sit in each 2 x 2 cell: (row, column).
_BAYER_CELLS = {"srggb8": ((0, 0), (0, 1), (1, 0), (1, 1)), "sbggr8": ((1, 1), (0, 1), (1, 0), (0, 0)),
                "sgbrg8": ((1, 0), (0, 0), (1, 1), (0, 1)), "sgrbg8": ((0, 1), (0, 0), (1, 1), (1, 0))}


def to_bgr(frame, use_opencv=True):
    """A BGR (h, w, 3) uint8 image of any frame. The engine's YUV is full-range BT.601 (JFIF, as
    its JPEGs): every YUV layout is converted with those coefficients, so a picture has the same
    colours whatever format carried it (OpenCV's own YUYV/NV12/I420 conversions assume limited
    range, and are not used)."""
    f = frame.format
    if f == "rgb24":
        return np.ascontiguousarray(frame.array[:, :, ::-1])
    if f == "bgr24":
        return np.ascontiguousarray(frame.array)
    if f == "bgra":
        return np.ascontiguousarray(frame.array[:, :, :3])
    if f in _BAYER_CELLS:
        return _bayer(frame, use_opencv and cv2 is not None)
    if cv2 is not None and use_opencv:
        return _opencv(frame)
    if f == "mjpeg":
        raise RuntimeError("decoding MJPEG frames needs OpenCV (pip install opencv-python-headless)")
    if f == "grey":
        return np.repeat(frame.y[:, :, None], 3, axis=2)
    return _numpy(frame)


def _opencv(frame):
    f = frame.format
    if f == "grey":
        return cv2.cvtColor(frame.y, cv2.COLOR_GRAY2BGR)
    if f == "mjpeg":
        image = cv2.imdecode(frame.data, cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError("frame %d does not decode as JPEG" % frame.index)
        return image
    y = frame.y
    h, w = y.shape
    # Chroma repeated to the luma's size (as the NumPy path), then full-range YCrCb -> BGR.
    u = cv2.resize(np.ascontiguousarray(frame.u), (w, h), interpolation=cv2.INTER_NEAREST)
    v = cv2.resize(np.ascontiguousarray(frame.v), (w, h), interpolation=cv2.INTER_NEAREST)
    return cv2.cvtColor(cv2.merge([np.ascontiguousarray(y), v, u]), cv2.COLOR_YCrCb2BGR)


def _bayer(frame, opencv):
    """A Bayer mosaic (one byte a pixel) to BGR: OpenCV's bilinear demosaic, else each 2 x 2
    cell's R, mean G and B repeated over the cell."""
    mosaic = np.ascontiguousarray(frame.array)
    if opencv:
        return cv2.cvtColor(mosaic, getattr(cv2, _BAYER_OPENCV[frame.format]))
    h, w = mosaic.shape
    (ry, rx), (g1y, g1x), (g2y, g2x), (by, bx) = _BAYER_CELLS[frame.format]
    m = mosaic[: h - h % 2, : w - w % 2].astype(np.uint16)
    r, b = m[ry::2, rx::2], m[by::2, bx::2]
    g = (m[g1y::2, g1x::2] + m[g2y::2, g2x::2] + 1) // 2
    cells = np.dstack([b, g, r]).astype(np.uint8)
    full = np.repeat(np.repeat(cells, 2, axis=0), 2, axis=1)
    out = np.zeros((h, w, 3), np.uint8)
    out[: full.shape[0], : full.shape[1]] = full
    if h % 2:
        out[-1] = out[-2]
    if w % 2:
        out[:, -1] = out[:, -2]
    return out


def _full_resolution(frame):
    """Y, U, V at the luma's size (chroma repeated)."""
    y = frame.y
    h, w = y.shape
    u, v = frame.u, frame.v
    ry, rx = (2 if u.shape[0] * 2 <= h + 1 and u.shape[0] < h else 1), (2 if u.shape[1] < w else 1)
    u = np.repeat(np.repeat(u, ry, axis=0), rx, axis=1)[:h, :w]
    v = np.repeat(np.repeat(v, ry, axis=0), rx, axis=1)[:h, :w]
    return y, u, v


def _numpy(frame):
    """Full-range BT.601 (JFIF) YCbCr -> BGR, as OpenCV's YCrCb conversion does."""
    y, u, v = (a.astype(np.float32) for a in _full_resolution(frame))
    u -= 128.0
    v -= 128.0
    b = y + 1.772 * u
    g = y - 0.344136 * u - 0.714136 * v
    r = y + 1.402 * v
    return np.clip(np.dstack([b, g, r]) + 0.5, 0, 255).astype(np.uint8)
