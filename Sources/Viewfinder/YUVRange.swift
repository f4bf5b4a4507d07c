import CViewfinderKernels

/// The quantization of 8-bit YUV. The engine's YUV is full range (0–255, JPEG's) everywhere;
/// cameras may deliver limited range (luma 16–235, chroma 16–240: BT.601/709 "video" levels, what
/// V4L2 calls `V4L2_QUANTIZATION_LIM_RANGE` and what its default means for a YUV camera).
///
/// A V4L2 camera's limited-range frames are stretched as they are dequeued
/// (`V4L2Camera.Options.expandLimitedRange`, or `/dev/video0,range=keep` to keep the driver's
/// bytes); ``expandToFull(_:)`` does the same for frames that came another way (a raw dump
/// recorded with `range=keep`, a source of your own). The stretch is lossy at the ends (values
/// outside the limited range clip) and nothing in a frame says it was made: stretch a frame once.
public enum YUVRange {
    /// Stretches `frame`'s limited-range YUV to full range in place (luma 16–235 and chroma 16–240
    /// to 0–255, rounded; values outside clip; neutral chroma 128 stays 128). Returns false and
    /// leaves the frame alone when its format has no YUV samples (RGB, Bayer, MJPEG).
    @discardableResult
    public static func expandToFull(_ frame: Frame) -> Bool {
        expand(frame.data, capacity: frame.capacity, format: frame.format)
    }

    /// The same over `format`'s layout at `data` (`capacity` bytes). Nothing is allocated.
    @discardableResult
    package static func expand(_ data: UnsafeMutableRawPointer, capacity: Int, format: FrameFormat) -> Bool {
        let layout: Int32
        switch format.pixelFormat {
        case .yuyv: layout = 2
        case .uyvy: layout = 3
        case .grey, .nv12, .i420, .yuv422p: layout = 0
        default: return false
        }
        for i in 0..<format.planeCount {
            let p = format.plane(i)
            let count = min(p.byteCount, capacity - p.offset)
            guard count > 0 else { break }
            vf_expand_limited_range(data.advanced(by: p.offset).assumingMemoryBound(to: UInt8.self), count, i == 0 ? layout : 1)
        }
        return true
    }
}
