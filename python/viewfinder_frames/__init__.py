"""Read Viewfinder's shared-memory frame ring (``viewfinder run ... --shm NAME``) as NumPy arrays.

    from viewfinder_frames import FrameReader
    with FrameReader("cam") as reader:
        for frame in reader:                 # newest frames, in order; gaps are counted
            y = frame.y                      # a view of the shared memory: no copy
            keep = frame.copy()              # an owned copy, safe after the writer moves on

The ring layout is documented in README.md next to this package.
"""

from ._ring import FrameReader, Frame, RingFinished, WriterGone, RingNotFound, NotARing, ReaderClosed, LAYOUT_VERSION

__all__ = ["FrameReader", "Frame", "RingFinished", "WriterGone", "RingNotFound", "NotARing", "ReaderClosed", "LAYOUT_VERSION"]
__version__ = "0.1.0"
