"""Frame -> BGR: OpenCV when it is installed (fast, and it decodes MJPEG), else NumPy."""

import numpy as np

try:  # OpenCV is optional
    import cv2
except Exception:  # pragma: no cover - not installed, or broken (an ABI mismatch with NumPy)
    cv2 = None


def to_bgr(frame, use_opencv=True):
    f = frame.format
    if f == "rgb24":
        return np.ascontiguousarray(frame.array[:, :, ::-1])
    if cv2 is not None and use_opencv:
        return _opencv(frame)
    if f == "mjpeg":
        raise RuntimeError("decoding MJPEG frames needs OpenCV (pip install opencv-python-headless)")
    if f == "grey":
        return np.repeat(frame.y[:, :, None], 3, axis=2)
    return _numpy(frame)


def _opencv(frame):
    f = frame.format
    if f == "yuyv":
        return cv2.cvtColor(frame.array, cv2.COLOR_YUV2BGR_YUYV)
    if f == "uyvy":
        return cv2.cvtColor(frame.array, cv2.COLOR_YUV2BGR_UYVY)
    if f == "grey":
        return cv2.cvtColor(frame.y, cv2.COLOR_GRAY2BGR)
    if f == "mjpeg":
        image = cv2.imdecode(frame.data, cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError("frame %d does not decode as JPEG" % frame.index)
        return image
    w, h = frame.width, frame.height
    tight = w % 2 == 0 and h % 2 == 0 and frame.planes[0].strides[0] == w
    if f in ("nv12", "i420") and tight:
        # OpenCV wants the planes stacked as one (3h/2, w) picture: exactly the frame's bytes.
        stacked = frame.data[: w * h * 3 // 2].reshape(h * 3 // 2, w)
        return cv2.cvtColor(stacked, cv2.COLOR_YUV2BGR_NV12 if f == "nv12" else cv2.COLOR_YUV2BGR_I420)
    y, u, v = _full_resolution(frame)
    return cv2.cvtColor(np.dstack([y, v, u]), cv2.COLOR_YCrCb2BGR)


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
