import Dispatch
import Synchronization

/// Receives frames from a ``VideoDataOutput`` (AVFoundation's `AVCaptureVideoDataOutputSampleBufferDelegate`).
public protocol VideoDataOutputDelegate: AnyObject, Sendable {
    /// A frame, on the delegate's queue, as a sample buffer: keep the sample buffer to keep the
    /// frame (its buffer goes back to the pool or the device when the last reference to the sample
    /// buffer goes, exactly once — there is nothing to release by hand).
    func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?)
    /// A frame that was dropped before it reached the delegate, and why.
    func videoDataOutput(_ output: VideoDataOutput, didDrop sequence: UInt64, reason: DropReason)
}

extension VideoDataOutputDelegate {
    public func videoDataOutput(_ output: VideoDataOutput, didDrop sequence: UInt64, reason: DropReason) {}
}

/// Delivers frames to a delegate on a caller-chosen queue, or as an `AsyncSequence`
/// (AVFoundation's `AVCaptureVideoDataOutput`).
///
/// By default it discards late frames: while the delegate is still busy with one frame, newer
/// frames replace each other and only the newest is delivered; every discarded frame is counted
/// (reason ``DropReason/late``) and reported to the delegate.
public final class VideoDataOutput: CaptureOutput, @unchecked Sendable {
    // @unchecked Sendable: delegate/queue/continuations behind `state`; `busy` is atomic.
    public let consumerName: String
    public var acceptedMediaTypes: Set<MediaType> { [.video] }
    public var ringCapacity: Int { 4 }
    private let discardLate: Bool
    public var discardsLateFrames: Bool { discardLate }
    public var overflowPolicy: OverflowPolicy { .dropOldest }

    private struct State {
        var delegate: (any VideoDataOutputDelegate)?
        var queue: DispatchQueue?
        var continuations: [UInt64: AsyncStream<SampleBuffer>.Continuation] = [:]
        var nextID: UInt64 = 0
        var connection: CaptureConnection?
    }
    private let state = LockedBox(State())
    private let busy = Atomic<Bool>(false)
    private let lateDrops = Atomic<UInt64>(0)
    private let delivered = Atomic<UInt64>(0)

    /// - Parameters:
    ///   - name: the output's name in statistics and logs.
    ///   - alwaysDiscardsLateVideoFrames: true (the default) drops frames that arrive while the
    ///     delegate is busy; false queues them (bounded by the ring) instead.
    public init(name: String = "video-data", alwaysDiscardsLateVideoFrames: Bool = true) {
        self.consumerName = name
        self.discardLate = alwaysDiscardsLateVideoFrames
    }

    /// Sets the delegate and the queue its callbacks run on.
    public func setDelegate(_ delegate: (any VideoDataOutputDelegate)?, queue: DispatchQueue?) {
        state.withLock { $0.delegate = delegate; $0.queue = queue }
    }

    /// Frames as an async sequence. With late-frame discarding only the newest unconsumed frame is
    /// kept; otherwise up to 8 are buffered. Each sample buffer gives its frame back when the last
    /// reference to it goes.
    public func frames() -> AsyncStream<SampleBuffer> {
        let policy: AsyncStream<SampleBuffer>.Continuation.BufferingPolicy = discardLate ? .bufferingNewest(1) : .bufferingNewest(8)
        return AsyncStream(bufferingPolicy: policy) { continuation in
            let id = state.withLock { s -> UInt64 in s.nextID += 1; s.continuations[s.nextID] = continuation; return s.nextID }
            continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.continuations.removeValue(forKey: id) } }
        }
    }

    /// Frames dropped as late on this output.
    public var droppedLateFrames: UInt64 { lateDrops.load(ordering: .relaxed) }
    /// Frames handed to the delegate or the async sequence.
    public var deliveredFrames: UInt64 { delivered.load(ordering: .relaxed) }

    public func sessionDidConnect(_ connection: CaptureConnection) { state.withLock { $0.connection = connection } }
    public func sessionDidDisconnect(_ connection: CaptureConnection) {
        state.withLock { if $0.connection === connection { $0.connection = nil } }
    }

    /// A sample buffer holding one more reference to `frame` (lent to `consume`).
    private func sampleBuffer(_ frame: Frame) -> SampleBuffer {
        frame.retain()
        return SampleBuffer(adopting: frame)
    }

    public func consume(_ frame: Frame) {
        let (delegate, queue, conts, connection) = state.withLock { ($0.delegate, $0.queue, $0.continuations, $0.connection) }
        for c in conts.values {
            if case .dropped = c.yield(sampleBuffer(frame)) { lateDrops.add(1, ordering: .relaxed) }
        }
        guard let delegate else { return }
        guard let queue else {
            delegate.videoDataOutput(self, didOutput: sampleBuffer(frame), from: connection)
            delivered.add(1, ordering: .relaxed)
            return
        }
        if discardLate && busy.load(ordering: .acquiring) {
            lateDrops.add(1, ordering: .relaxed)
            let seq = frame.sequence
            queue.async { delegate.videoDataOutput(self, didDrop: seq, reason: .late) }
            return
        }
        busy.store(true, ordering: .relaxed)
        let buffer = sampleBuffer(frame)
        queue.async {
            delegate.videoDataOutput(self, didOutput: buffer, from: connection)
            self.delivered.add(1, ordering: .relaxed)
            self.busy.store(false, ordering: .releasing)
        }
    }

    public func finish(error: (any Error)?) {
        let conts = state.withLock { s -> [AsyncStream<SampleBuffer>.Continuation] in
            let c = Array(s.continuations.values); s.continuations = [:]; return c
        }
        for c in conts { c.finish() }
    }
}
