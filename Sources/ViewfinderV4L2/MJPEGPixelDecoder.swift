import Viewfinder

/// TurboJPEG behind the engine's `PixelDecoder`: each MJPEG frame's decoded view for the stages,
/// at full size or at 1/2, 1/4, 1/8 by the DCT scaling (the reduced decodes cost a fraction of a
/// full one). 4:2:2 JPEGs decode to `PixelFormat/yuv422p`, 4:2:0 to `PixelFormat/i420`,
/// greyscale to `PixelFormat/grey`; other subsamplings (4:4:4, 4:4:0) give their luma only.
/// A damaged JPEG throws, and the engine drops the frame as corrupt.
public final class MJPEGPixelDecoder: PixelDecoder {
    private let decoder: MJPEGDecoder

    public init() throws { decoder = try MJPEGDecoder() }

    public var scaleDenominators: [Int] { MJPEGDecoder.scaleDenominators }

    /// The 4:2:2 layout bounds every other one (4:2:0, grey).
    public func decodedByteCount(for format: FrameFormat, scale: Int) -> Int {
        let w = (format.width + scale - 1) / scale, h = (format.height + scale - 1) / scale
        return FrameFormat(.yuv422p, width: w, height: h, bytesPerRow: (w + 1) & ~1).maxByteCount
    }

    public func decode(_ source: Frame, scale: Int, into target: Frame) throws {
        let jpeg = UnsafeRawBufferPointer(source.bytes)
        if try decoder.header(jpeg).pixelFormat == nil {
            try decoder.decodeLuma(jpeg, scaleDenominator: scale, into: target)
        } else {
            try decoder.decode(jpeg, scaleDenominator: scale, into: target)
        }
    }

    /// The factory ViewfinderKit's device directory installs.
    public struct Factory: PixelDecoderFactory {
        public init() {}
        public func makeDecoder(for format: FrameFormat) -> (any PixelDecoder)? {
            guard format.pixelFormat == .mjpeg else { return nil }
            return try? MJPEGPixelDecoder()
        }
    }
}
