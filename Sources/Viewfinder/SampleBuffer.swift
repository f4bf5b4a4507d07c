/// A frame owned through ARC, as AVFoundation's `CMSampleBuffer`: holding the sample buffer holds
/// the frame (a pool buffer, or a V4L2 device's kernel buffer), and the buffer's `deinit` gives the
/// frame back, exactly once. What ``VideoDataOutput`` hands to user code.
///
/// The ``frame`` is valid while the sample buffer lives: read it (or keep the sample buffer), not a
/// reference to the frame alone.
public final class SampleBuffer: @unchecked Sendable {
    // @unchecked Sendable: the frame is read-only once it has left the stage chain; the reference
    // count is atomic.
    /// The frame: pixels, format, timing and metadata.
    public let frame: Frame

    /// Takes a reference the caller owns (engine side).
    package init(adopting frame: Frame) { self.frame = frame }

    /// Keeps a frame that is lent to the caller (in ``FrameConsumer/consume(_:)``, or
    /// ``Stage/process(_:)``) beyond the call. Nil if the frame is no longer held by anyone (it went
    /// back to its pool or device): a stale reference cannot bring a frame back.
    public init?(retaining frame: Frame) {
        guard !frame.isRecycled || frame.retainIfHeld() else { return nil }
        if !frame.isRecycled { frame.retain() }
        self.frame = frame
    }

    deinit { frame.release() }

    public var sequence: UInt64 { frame.sequence }
    public var timestamp: Timestamp { frame.timestamp }
    public var format: FrameFormat { frame.format }
    public var metadata: FrameMetadata { frame.metadata }
    /// The valid bytes, for the duration of `body`.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(frame.bytes))
    }
}

/// The sample buffers ``VideoDataOutput/frames()`` yields (AVFoundation's name for the model is
/// `CMSampleBuffer`; this package's first name for it was `VideoFrame`).
public typealias VideoFrame = SampleBuffer

/// Sole ownership of one frame, without an allocation: a `~Copyable` value, so it cannot be
/// duplicated, and its `deinit` gives the frame back exactly once. From ``FramePool/lease()``.
public struct FrameLease: ~Copyable, @unchecked Sendable {
    // @unchecked Sendable: whoever owns the lease is the frame's only user.
    /// The frame, valid for the life of the lease.
    public let frame: Frame

    package init(owning frame: Frame) { self.frame = frame }

    deinit { frame.release() }

    /// Shares the frame through ARC: the sample buffer keeps it after this lease ends.
    public func share() -> SampleBuffer {
        frame.retain()
        return SampleBuffer(adopting: frame)
    }
}

/// What ``CaptureSource/nextSample(timeoutNanoseconds:)`` returns: a ``SourceEvent`` whose frame
/// is owned through a ``SampleBuffer``.
public enum SourceSample {
    case sample(SampleBuffer)
    case timeout
    case lost(DropReason, count: Int)
    case endOfStream
}

extension CaptureSource {
    /// The next event for code that drives a source by hand, outside an engine: the frame comes
    /// as a ``SampleBuffer``, so it goes back to its pool or device when the last reference to the
    /// sample buffer goes. (``next(timeoutNanoseconds:)`` hands the engine a reference only the
    /// engine can give back.)
    public func nextSample(timeoutNanoseconds: UInt64) throws -> SourceSample {
        switch try next(timeoutNanoseconds: timeoutNanoseconds) {
        case .frame(let f): return .sample(SampleBuffer(adopting: f))
        case .timeout: return .timeout
        case .lost(let r, let n): return .lost(r, count: n)
        case .endOfStream: return .endOfStream
        }
    }
}
