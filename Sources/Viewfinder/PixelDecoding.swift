import Synchronization

/// What pixels a stage needs, declared in ``Stage/prepare(format:context:)`` through
/// ``StageContext/pixels``.
///
/// On YUV formats a stage reads and changes the frame's own planes and the declaration costs
/// nothing. On MJPEG, RGB and Bayer the engine makes one decoded view per frame — shared by every
/// stage that asked, from pooled buffers — at the smallest size that serves them all: a reduced
/// size when only statistics are wanted (TurboJPEG's scaled decode: 1/8 is nearly free), full size
/// when a stage reads or changes full-size planes.
public enum PixelNeed: Sendable, Equatable {
    /// Statistics (metering, a focus score): a picture at least `minimumWidth` samples wide does.
    case statistics(minimumWidth: Int)
    /// Full-size planes to read.
    case read
    /// Full-size planes to change (``Frame/mutablePixels()``); the change goes to the sinks, which
    /// then encode the changed pixels instead of passing the camera's JPEG through.
    case modify
}

/// The pixel needs of a chain's stages, collected during `prepare`.
public final class PixelRequests: @unchecked Sendable {
    // @unchecked Sendable: written by `prepare` and read by the engine before frames flow, on one
    // thread at a time; guarded anyway.
    private let needs = LockedBox<[PixelNeed]>([])
    /// Whether the engine can give stages pixels for this stream's format (a YUV format, or a
    /// decoder for it).
    public let available: Bool
    /// What the stream is, for messages.
    public let format: FrameFormat

    public init(format: FrameFormat, available: Bool = true) {
        self.format = format
        self.available = available
    }

    /// Declares what a stage needs. Throws ``ConfigurationError/unsupportedStream(stage:reason:)``
    /// when the stream's pixels cannot be had (MJPEG without a decoder installed).
    public func need(_ n: PixelNeed, stage: String) throws {
        guard available else {
            throw ConfigurationError.unsupportedStream(stage: stage,
                                                   reason: "\(format.pixelFormat) frames need a decoder to give stages pixels (open the device through ViewfinderKit's DeviceDirectory.standard, or pass one to the engine)")
        }
        needs.withLock { $0.append(n) }
    }

    /// Everything declared so far.
    public var all: [PixelNeed] { needs.withLock { $0 } }

    /// Forgets the declarations (before the stages are prepared again).
    public func reset() { needs.withLock { $0.removeAll() } }

    /// The scale denominator that serves every need: 1 for full size, else the largest of
    /// `available` whose reduced width still meets every statistics request. Nil when nothing is
    /// needed.
    public func scale(width: Int, available denominators: [Int]) -> Int? {
        let ns = all
        guard !ns.isEmpty else { return nil }
        var best = Int.max
        for n in ns {
            switch n {
            case .read, .modify: return 1
            case .statistics(let minimumWidth):
                let fit = denominators.filter { (width + $0 - 1) / $0 >= minimumWidth }.max() ?? 1
                best = min(best, fit)
            }
        }
        return best == Int.max ? 1 : best
    }
}

/// Turns frames of one format into YUV planes a stage can read: an MJPEG decoder (TurboJPEG, from
/// ViewfinderV4L2, installed by ViewfinderKit), or the core's RGB and Bayer conversion. Used by one
/// thread (the stage thread).
public protocol PixelDecoder: AnyObject {
    /// The reductions it makes directly (1 = full size; 2, 4, 8 for 1/2, 1/4, 1/8).
    var scaleDenominators: [Int] { get }
    /// Bytes a decoded frame of a `format` frame at 1/`scale` needs at most.
    func decodedByteCount(for format: FrameFormat, scale: Int) -> Int
    /// Decodes `source` at 1/`scale` into `target`'s memory, setting `target.format` (a YUV
    /// format) and `bytesUsed`. Throws for damaged input (the frame is then dropped as corrupt).
    func decode(_ source: Frame, scale: Int, into target: Frame) throws
}

/// An output that decodes frames itself on its own thread when it needs to (the video data
/// output's pixel formats, a turned preview of a camera's JPEGs): the session hands it the
/// device's decoders when it starts.
public protocol PixelDecodingOutput: AnyObject {
    func setPixelDecoders(_ decoders: (any PixelDecoderFactory)?)
}

/// Makes decoders; what the engine is given (ViewfinderKit's device directory carries TurboJPEG's).
public protocol PixelDecoderFactory: Sendable {
    /// A decoder for frames of `format`, nil when it has none.
    func makeDecoder(for format: FrameFormat) -> (any PixelDecoder)?
}

/// The decoders of a given factory (MJPEG; or its own conversion of anything else), then the
/// core's conversion of RGB24, BGR24 and 8-bit Bayer.
public struct StandardPixelDecoders: PixelDecoderFactory {
    public let preferred: (any PixelDecoderFactory)?
    public init(_ preferred: (any PixelDecoderFactory)? = nil) { self.preferred = preferred }
    public func makeDecoder(for format: FrameFormat) -> (any PixelDecoder)? {
        if let d = preferred?.makeDecoder(for: format) { return d }
        return RGBBayerConverter.handles(format.pixelFormat) ? RGBBayerConverter() : nil
    }
}

/// The engine's side: gives each frame of a non-YUV stream its decoded view, once, at the scale
/// the stages need, in frames of a pool that grows to the pipeline's depth and then only recycles.
final class DecodedViewProvider: FrameRecycler, @unchecked Sendable {
    // @unchecked Sendable: `free`/`allocated` are guarded by `lock` (frames come back from sink
    // threads); the decoder is used on the stage thread only.
    let decoder: any PixelDecoder
    let scale: Int
    let frameCapacity: Int
    let limit: Int
    private let lock = ConditionLock()
    private var free: [Frame] = []
    private var allocated = 0

    init(decoder: any PixelDecoder, format: FrameFormat, scale: Int, limit: Int) {
        self.decoder = decoder
        self.scale = scale
        self.frameCapacity = decoder.decodedByteCount(for: format, scale: scale)
        self.limit = max(2, limit)
        free.reserveCapacity(self.limit)
    }

    /// Frames made so far (the pool's high-water mark).
    var frameCount: Int { lock.withLock { allocated } }

    private func acquire() -> Frame? {
        lock.lock()
        if let f = free.popLast() { lock.unlock(); f.retain(); return f }
        guard allocated < limit else { lock.unlock(); return nil }
        allocated += 1
        let index = allocated
        lock.unlock()
        let f = Frame(capacity: frameCapacity, format: FrameFormat(.grey, width: 1, height: 1), index: index, recycler: self)
        f.retain()
        return f
    }

    func recycle(_ frame: Frame) {
        lock.withLock { free.append(frame) }
    }

    /// Attaches `frame`'s decoded view; nil on success, else the reason to drop the frame.
    func attach(to frame: Frame) -> DropReason? {
        guard let d = acquire() else { return .outOfBuffers }
        do {
            try decoder.decode(frame, scale: scale, into: d)
        } catch {
            d.release()
            return .corrupt
        }
        d.sequence = frame.sequence
        d.timestamp = frame.timestamp
        frame.setDecoded(d)
        return nil
    }
}
