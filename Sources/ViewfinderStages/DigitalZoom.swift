#if canImport(Glibc)
import Glibc
#endif
import Viewfinder

/// Digital zoom by crop and resample: the centre `1/factor` of a frame scaled back to the full
/// size with ``Warp`` (bilinear, every plane), in place through one scratch copy of the frame.
/// YUYV, UYVY, NV12, I420, 4:2:2 planar and grey; compressed formats (MJPEG) are refused in
/// ``prepare(format:)``, and `CaptureDevice.setVideoZoomFactor(_:)` says so with a typed error.
/// Stage thread only; allocates in `prepare`, never per frame.
public final class DigitalZoom: DigitalZooming {
    private var scratch: UnsafeMutableRawPointer?
    private var scratchBytes = 0
    private var workspace: WarpWorkspace?
    private var format: FrameFormat?

    public init() {}

    deinit { scratch?.deallocate() }

    /// The formats it zooms.
    public static let formats: Set<PixelFormat> = [.yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey]

    public func prepare(format: FrameFormat) -> Bool {
        guard Self.formats.contains(format.pixelFormat), format.width >= 2, format.height >= 2 else { self.format = nil; return false }
        if scratchBytes < format.maxByteCount {
            scratch?.deallocate()
            scratchBytes = format.maxByteCount
            scratch = .allocate(byteCount: scratchBytes, alignment: 64)
        }
        if (workspace?.maxWidth ?? 0) < format.width { workspace = WarpWorkspace(maxWidth: format.width) }
        self.format = format
        return true
    }

    /// The map from output to source pixels for `factor` about the centre.
    public static func map(factor: Double, width: Int, height: Int) -> AffineMap {
        AffineMap.correction(dx: 0, dy: 0, angle: 0, zoom: factor, width: width, height: height)
    }

    public func zoom(_ frame: Frame, factor: Double) {
        guard factor > 1, let f = format, let scratch, frame.format == f, frame.bytesUsed <= scratchBytes else { return }
        memcpy(scratch, frame.data, frame.bytesUsed)
        Warp.frame(frame, from: scratch.assumingMemoryBound(to: UInt8.self), map: Self.map(factor: factor, width: f.width, height: f.height), workspace: workspace)
    }
}
