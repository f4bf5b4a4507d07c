"""The reader of the ring. Layout: README.md (and the Swift DocC article "SharedMemoryRing")."""

import ctypes
import json
import mmap
import os
import platform
import stat
import struct
import time

import numpy as np

LAYOUT_VERSION = 1
MAGIC = b"VFRING01"
HEADER_SIZE = 4096
SLOT_HEADER_SIZE = 256
STATE_RUNNING, STATE_FINISHED = 1, 2
CLOCKS = ("monotonic", "monotonic_raw", "realtime", "boottime", "unknown")
# Header: everything from the version to the creation time, in one struct.
_HEADER = struct.Struct("<8sIIIIQIIQIIII48s16sIIIIQQ")
_PUBLISHED_WORD = 192 // 8   # u64 index of the published count
_FUTEX_OFFSET = 200          # u32 futex word
# Slot header: index .. output_ns (the sequence word at 0 is read on its own).
_SLOT = struct.Struct("<QQQIIQQQIIQ")
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "riscv64": 98, "armv7l": 240, "i686": 240}.get(platform.machine())


class RingNotFound(FileNotFoundError):
    """No ring of that name in /dev/shm."""


class NotARing(ValueError):
    """/dev/shm/NAME exists but is not a Viewfinder frame ring of a layout this reader knows."""


class ReaderClosed(ValueError):
    """The reader was closed: it reads no more frames (the frames it gave keep their mapping)."""


class _Incomplete(Exception):
    """The file exists but its header is not written yet."""


class RingFinished(Exception):
    """The writer has ended the run and every frame was offered."""


class WriterGone(RingFinished):
    """The writer's process is gone (killed) without ending the run; no frame will come. A
    RingFinished, so code that stops at the end stops here too; ``except WriterGone`` tells
    the two apart."""


class _timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _futex_waiter():
    """A function that sleeps on a futex word in the mapping, or None without one."""
    if _SYS_FUTEX is None or platform.system() != "Linux":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long

    def wait(address, expected, timeout_s):
        ts = _timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
        syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(address), ctypes.c_int(0),
                ctypes.c_uint32(expected), ctypes.byref(ts), None, ctypes.c_int(0))
    return wait


_WAIT = _futex_waiter()


class Frame:
    """One frame of the ring. Its arrays view the shared memory (no copy) and stay valid until
    the writer reuses the slot, N frames later (N = ``reader.slot_count``): check ``valid()``
    after working on them, or take ``copy()``."""

    __slots__ = ("index", "sequence", "timestamp_ns", "clock", "dropped_before", "receive_ns",
                 "publish_ns", "output_ns", "bytes_used", "pixels_modified", "format", "width",
                 "height", "data", "_reader", "_slot", "_meta_raw", "_metadata", "_seq", "_owned",
                 "_owned_planes", "_mm", "_words")

    def __init__(self):
        self._metadata = None
        self._owned = False

    # --- pixels -------------------------------------------------------------------------------
    def _plane(self, i, samples_per_pixel=1):
        off, bpr, w, h = self._reader._planes[i]
        if self._owned:
            return self._owned_planes[i]
        # The frame's own reference to the mapping: it outlives the reader's close().
        return np.ndarray((h, w * samples_per_pixel), np.uint8, self._mm,
                          self._slot + self._reader.pixel_offset + off, (bpr, 1))

    @property
    def planes(self):
        """The planes as 2-D uint8 arrays: [Y, U, V] (I420, YUV422P), [Y, UV] (NV12, UV
        interleaved, shape (h/2, w, )), one packed plane (YUYV/UYVY: (h, 2w); RGB24/BGR24:
        (h, 3w); BGRA: (h, 4w); GREY and the Bayer mosaics: (h, w)). MJPEG has none: use ``data``."""
        if self.format == "mjpeg":
            return []
        per = _SAMPLES_PER_PIXEL.get(self.format, [1, 1, 1])
        return [self._plane(i, per[min(i, len(per) - 1)]) for i in range(len(self._reader._planes))]

    def _first_plane(self):
        if self.format == "mjpeg":
            raise ValueError("an MJPEG frame carries the camera's JPEG, not planes: use to_bgr() "
                             "(decodes it) or data (the JPEG's bytes)")
        return self.planes[0]

    @property
    def array(self):
        """The picture in its natural shape: (h, w, 2) for YUYV/UYVY, (h, w, 3) for RGB24 and
        BGR24, (h, w, 4) for BGRA, (h, w) for GREY, the Bayer mosaics and the luma of planar
        formats. (MJPEG: ValueError; use to_bgr().)"""
        p = self._first_plane()
        per = _SAMPLES_PER_PIXEL.get(self.format, [1])[0]
        if per > 1:
            return p.reshape(p.shape[0], p.shape[1] // per, per)
        return p

    @property
    def y(self):
        """Luma, (h, w); a strided view for packed 4:2:2. (MJPEG: ValueError; use to_bgr().
        RGB, BGR, BGRA and Bayer frames carry no luma: ValueError; use array or to_bgr().)"""
        if self.format in _NO_LUMA:
            raise ValueError("%s frames carry no luma plane: use array (the camera's samples) or to_bgr()" % self.format)
        a = self._first_plane()
        if self.format == "yuyv":
            return a[:, 0::2]
        if self.format == "uyvy":
            return a[:, 1::2]
        return a

    @property
    def u(self):
        return self._chroma(0)

    @property
    def v(self):
        return self._chroma(1)

    def _chroma(self, k):
        f = self.format
        if f == "mjpeg":
            self._first_plane()
        if f in ("yuyv", "uyvy"):
            return self.planes[0][:, (1 if f == "yuyv" else 0) + 2 * k::4]
        if f == "nv12":
            return self.planes[1][:, k::2]
        if f in ("i420", "yuv422p"):
            return self.planes[1 + k]
        raise ValueError("%s frames have no chroma planes: use array (the camera's samples) or to_bgr()" % f)

    def to_bgr(self):
        """A BGR (h, w, 3) uint8 image: OpenCV when it is installed, else NumPy (BT.601)."""
        from ._convert import to_bgr
        return to_bgr(self)

    # --- metadata and validity ------------------------------------------------------------------
    @property
    def metadata(self):
        """The frame's metadata (the same JSON object as ``viewfinder run --metadata``), parsed
        on first use; None when it did not fit the slot. Its bytes are copied when the frame is
        read, so it stays this frame's after the writer reuses the slot."""
        if self._metadata is None and self._meta_raw is not None:
            self._metadata = json.loads(bytes(self._meta_raw))
        return self._metadata

    def valid(self):
        """True while the slot still holds this frame (the views show what they showed)."""
        return self._owned or int(self._words[self._slot // 8]) == self._seq

    def copy(self):
        """A frame whose arrays own their memory (safe to keep after the writer moves on).
        Raises BufferError if the writer overwrote the slot while it was being copied."""
        c = Frame.__new__(Frame)
        for k in _COPIED:
            setattr(c, k, getattr(self, k))
        c.data = np.array(self.data, copy=True)
        c._meta_raw = self._meta_raw
        c._metadata = self._metadata
        c._owned_planes = [np.array(p, copy=True) for p in self.planes]
        if not self.valid():
            raise BufferError("frame %d was overwritten by the writer before its copy was complete: the reader "
                              "fell more than %d frames behind (the ring's slots); take copy() first, work faster, or "
                              "give the run more --shm-slots" % (self.index, self._reader.slot_count))
        c._owned = True
        return c

    @property
    def timestamp(self):
        """Capture time in seconds on ``clock``."""
        return self.timestamp_ns / 1e9

    def __repr__(self):
        return "<Frame %d seq=%d %s %dx%d t=%.6f>" % (self.index, self.sequence, self.format,
                                                       self.width, self.height, self.timestamp)


# Bytes per pixel of each plane's samples (formats not listed: one per pixel in every plane).
_SAMPLES_PER_PIXEL = {"yuyv": [2], "uyvy": [2], "rgb24": [3], "bgr24": [3], "bgra": [4], "nv12": [1, 2]}
_NO_LUMA = ("rgb24", "bgr24", "bgra", "sbggr8", "sgbrg8", "sgrbg8", "srggb8")

_COPIED = ("index", "sequence", "timestamp_ns", "clock", "dropped_before", "receive_ns", "publish_ns",
           "output_ns", "bytes_used", "pixels_modified", "format", "width", "height", "_reader",
           "_slot", "_seq", "_mm", "_words")


class FrameReader:
    """Attaches to ``/dev/shm/NAME`` read-only. Iterating yields frames in order, starting at the
    newest complete frame; a reader that falls more than a ring behind skips to the newest and
    adds what it skipped to ``missed``. Iteration ends when the writer finishes the run (or its
    process is gone)."""

    def __init__(self, name, wait=0.0, timeout=1.0):
        """``wait``: seconds to wait for the ring to appear. ``timeout``: how long one iteration
        step waits for a frame before checking that the writer still runs."""
        if not name or "/" in name or name in (".", ".."):
            raise ValueError("give the bare ring name (it lives in /dev/shm), not %r" % name)
        self.name = name
        self.timeout = timeout
        # Load the converters (and OpenCV, which takes about a second) now, not inside the first
        # frame's to_bgr(): a ring of 8 slots at 30 fps is lapped in 0.27 s.
        try:
            from . import _convert  # noqa: F401
        except Exception:  # pragma: no cover - a broken OpenCV install: to_bgr() will say so
            pass
        self.missed = 0
        self._mm = None
        deadline = time.monotonic() + wait
        while True:
            try:
                size = self._open()
                # A ring left behind by a killed run: while there is time to wait, wait for the
                # next writer (it replaces the file) instead of attaching to the dead one.
                if not self._is_stale() or time.monotonic() >= deadline:
                    break
                self._mm = None
                time.sleep(0.01)
                continue
            except (RingNotFound, _Incomplete) as e:
                # Not there yet, or its writer is still laying out the header (magic goes last).
                if time.monotonic() >= deadline:
                    if isinstance(e, _Incomplete):
                        raise NotARing(str(e)) from None
                    raise
                time.sleep(0.01)
        self._words = np.frombuffer(self._mm, dtype="<u8", count=size // 8)
        self._words32 = np.frombuffer(self._mm, dtype="<u4", count=HEADER_SIZE // 4)
        self._futex_address = self._words32.ctypes.data + _FUTEX_OFFSET
        published = int(self._words[_PUBLISHED_WORD])
        self.next_index = published - 1 if published > 0 else 0

    def _open(self):
        try:
            fd = os.open("/dev/shm/" + self.name, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise RingNotFound("no shared-memory ring '%s' (/dev/shm/%s)" % (self.name, self.name)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotARing("/dev/shm/%s is not a frame ring (not a regular file)" % self.name)
            size = st.st_size
            if size < HEADER_SIZE:
                raise _Incomplete("/dev/shm/%s is too small to be a frame ring" % self.name)
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        if self._mm[:8] == b"\0" * 8:
            raise _Incomplete("/dev/shm/%s has no ring header" % self.name)
        self._parse_header(size)
        return size

    def _parse_header(self, size):
        h = _HEADER.unpack_from(self._mm, 0)
        (magic, version, header_size, self.slot_count, slot_header, self.slot_stride,
         self.metadata_capacity, self.pixel_offset, self.pixel_capacity, fourcc, self.width,
         self.height, plane_count, planes, fmt, num, den, self.writer_pid, _state, self._start_ticks,
         self.created_ns) = h
        if magic != MAGIC or version != LAYOUT_VERSION or header_size != HEADER_SIZE or slot_header != SLOT_HEADER_SIZE:
            raise NotARing("/dev/shm/%s is not a Viewfinder frame ring (layout %d)" % (self.name, LAYOUT_VERSION))
        if self.slot_count < 1 or HEADER_SIZE + self.slot_count * self.slot_stride > size:
            raise NotARing("/dev/shm/%s: header and size disagree" % self.name)
        self.fourcc = struct.pack("<I", fourcc).decode("ascii", "replace")
        self.format = fmt.rstrip(b"\0").decode("ascii")
        self.fps = den / num if num else 0.0
        self._planes = [struct.unpack_from("<IIII", planes, 16 * i) for i in range(plane_count)]

    # --- state --------------------------------------------------------------------------------
    @property
    def published(self):
        """Frames the writer has published in this run."""
        self._check_open()
        return int(self._words[_PUBLISHED_WORD])

    @property
    def finished(self):
        self._check_open()
        return int(self._words32[140 // 4]) == STATE_FINISHED

    def _is_stale(self):
        """The ring's run neither ended nor has a live writer."""
        state = struct.unpack_from("<I", self._mm, 140)[0]
        return state != STATE_FINISHED and not self.writer_alive()

    def writer_alive(self):
        """Whether the writer's process still runs (a killed run leaves its ring behind)."""
        try:
            os.kill(self.writer_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            with open("/proc/%d/stat" % self.writer_pid) as f:
                s = f.read()
            fields = s[s.rindex(")") + 2:].split()
            return fields[0] != "Z" and (self._start_ticks == 0 or int(fields[19]) == self._start_ticks)
        except (OSError, ValueError, IndexError):
            return True

    # --- reading ------------------------------------------------------------------------------
    def read(self, timeout=None):
        """The next frame; None after ``timeout`` seconds without one (None: ``self.timeout``).
        Raises RingFinished once the run has ended and every frame was offered, and WriterGone
        (a RingFinished) when no frame is left and the writer's process is gone — found within
        half a second while waiting, not only at the timeout's end."""
        self._check_open()
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        next_check = time.monotonic() + 0.5
        words = self._words
        while True:
            seen = int(self._words32[_FUTEX_OFFSET // 4])
            published = int(words[_PUBLISHED_WORD])
            if published > self.next_index:
                if published - self.next_index > self.slot_count:
                    self._skip_to(published - 1)
                frame = self._read_slot(self.next_index)
                if frame is not None:
                    self.next_index += 1
                    return frame
                self._skip_to(int(words[_PUBLISHED_WORD]) - 1)
                continue
            if self.finished:
                raise RingFinished(self.name)
            now = time.monotonic()
            left = deadline - now
            if now >= next_check and int(words[_PUBLISHED_WORD]) <= self.next_index:
                # Nothing new for a while: a killed writer will publish nothing more.
                next_check = now + 0.5
                if not self.writer_alive():
                    raise WriterGone("the writer of '%s' (pid %d) is gone without ending the run"
                                     % (self.name, self.writer_pid))
            if left <= 0:
                if not self.writer_alive():
                    raise WriterGone("the writer of '%s' (pid %d) is gone without ending the run"
                                     % (self.name, self.writer_pid))
                return None
            if _WAIT is not None:
                _WAIT(self._futex_address, seen, min(left, 0.1))
            else:
                time.sleep(min(left, 0.0002))

    def _skip_to(self, index):
        if index > self.next_index:
            self.missed += index - self.next_index
            self.next_index = index

    def _read_slot(self, n):
        slot = HEADER_SIZE + (n % self.slot_count) * self.slot_stride
        seq = int(self._words[slot // 8])
        if seq != 2 * n + 2:
            return None
        (index, sequence, ts, clock, dropped, receive, publish, used, mlen, flags,
         output) = _SLOT.unpack_from(self._mm, slot + 8)
        f = Frame.__new__(Frame)
        f._metadata = None
        f._owned = False
        f.index, f.sequence, f.timestamp_ns = index, sequence, ts
        f.clock = CLOCKS[clock] if clock < len(CLOCKS) else "unknown"
        f.dropped_before, f.receive_ns, f.publish_ns, f.output_ns = dropped, receive, publish, output
        f.bytes_used = min(used, self.slot_stride - self.pixel_offset)
        f.pixels_modified = bool(flags & 2)
        f.format, f.width, f.height = self.format, self.width, self.height
        start = slot + self.pixel_offset
        f.data = np.ndarray((f.bytes_used,), np.uint8, self._mm, start)
        m0 = slot + SLOT_HEADER_SIZE
        # The metadata's bytes are copied now (a few hundred bytes): parsed later from the slot,
        # they could be another frame's once the writer has reused it.
        f._meta_raw = None if flags & 1 else bytes(self._mm[m0:m0 + min(mlen, self.metadata_capacity)])
        f._reader, f._slot, f._seq = self, slot, seq
        f._mm, f._words = self._mm, self._words
        if int(self._words[slot // 8]) != seq:
            return None
        return f

    def __iter__(self):
        while True:
            try:
                frame = self.read()
            except RingFinished:
                return
            if frame is not None:
                yield frame
            elif not self.writer_alive():
                return

    def close(self):
        """Lets go of the ring. Frames still referenced keep the mapping alive (and their
        arrays their pixels) until they go; the reader reads no more (ReaderClosed)."""
        self._closed = True
        self._words = self._words32 = None
        self._mm = None

    def _check_open(self):
        if getattr(self, "_closed", False):
            raise ReaderClosed("the reader of ring '%s' is closed" % self.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if getattr(self, "_closed", False):
            return "<FrameReader '%s' %s %dx%d, closed>" % (self.name, self.format, self.width, self.height)
        return "<FrameReader '%s' %s %dx%d, %d slots, %d published>" % (
            self.name, self.format, self.width, self.height, self.slot_count, self.published)
