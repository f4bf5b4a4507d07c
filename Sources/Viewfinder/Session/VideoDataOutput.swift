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

/// What a ``VideoDataOutput`` delivers (AVFoundation's `videoSettings`): a pixel format, and the
/// picture turned and mirrored as it should be shown.
public struct VideoOutputSettings: Sendable, Equatable {
    /// The pixel format of the delivered frames, one of ``FrameConverter/outputPixelFormats``
    /// (`.bgra`, `.rgb24`, `.bgr24`, `.nv12`, `.i420`, `.grey`); nil delivers the stream's own
    /// frames as they leave the stages, without a copy.
    public var pixelFormat: PixelFormat?
    /// Degrees clockwise the delivered picture is turned: 0, 90, 180 or 270.
    public var rotation: Int
    /// Whether the delivered picture is flipped left-right (after the rotation).
    public var isMirrored: Bool
    /// Take rotation and mirroring from the output's ``CaptureConnection`` (its
    /// `videoRotationAngle` and `isVideoMirrored`, as AVFoundation's video data output does)
    /// instead of ``rotation`` and ``isMirrored``.
    public var followsConnection: Bool
    /// Converted frames in the output's pool: how many sample buffers user code can hold at once
    /// before further frames are dropped as ``DropReason/outOfBuffers``.
    public var bufferCount: Int

    public init(pixelFormat: PixelFormat? = nil, rotation: Int = 0, isMirrored: Bool = false, followsConnection: Bool = false, bufferCount: Int = 6) {
        self.pixelFormat = pixelFormat
        self.rotation = rotation
        self.isMirrored = isMirrored
        self.followsConnection = followsConnection
        self.bufferCount = bufferCount
    }
}

/// Delivers frames to a delegate on a caller-chosen queue, or as an `AsyncSequence`
/// (AVFoundation's `AVCaptureVideoDataOutput`).
///
/// By default it discards late frames: with a delegate queue, a frame that arrives while the
/// delegate is still busy with an earlier one is dropped (the first frame to arrive after it
/// returns is delivered), counted (reason ``DropReason/late``) and reported to the delegate; with
/// no queue the delegate runs on the output's thread, and a slow one shows as the ring's drops
/// (``DropReason/ringFull``) instead. The ``frames()`` sequence keeps only the newest frame its
/// consumer has not taken; the older one it replaces is counted as late too.
///
/// Every frame the output does not deliver to its delegate reaches the delegate's
/// ``VideoDataOutputDelegate/videoDataOutput(_:didDrop:reason:)`` with its reason: late,
/// dropped on a full ring, out of buffers, corrupt (a camera JPEG that does not decode), dropped by
/// a stage, skipped by the driver, or behind storage (``DropReason/storageBacklog``).
///
/// With ``VideoOutputSettings`` it converts each delivered frame, once, on its own thread, into the
/// pixel format asked for (MJPEG decoded with the device's decoder), turned and mirrored — into a
/// pool of its own, so a steady stream allocates nothing. A pixel format asked for is always
/// delivered from that pool, even the stream's own (then copied): frames the app holds are the
/// output's, never the engine's.
public final class VideoDataOutput: CaptureOutput, PixelDecodingOutput, @unchecked Sendable {
    // @unchecked Sendable: delegate/queue/continuations behind `state`; `pendingCalls` is atomic;
    // the converter, pools and backlog are the output thread's.
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
    private let settingsBox = LockedBox(VideoOutputSettings())
    private let decodersBox = LockedBox<(any PixelDecoderFactory)?>(nil)
    private let lateDrops = Atomic<UInt64>(0)
    private let delivered = Atomic<UInt64>(0)
    private let droppedByReason = DropCounters()
    // Used on the output's thread only (`consume`, `didDrop`).
    private var converter: FrameConverter?
    private var pool: FramePool?
    private var retiredPools: [FramePool] = []
    private var decodersForConverter: (any PixelDecoderFactory)?
    /// Whether this run's source is live (the engine calls ``willConsume(framesWaiting:)`` on live
    /// sources only), and the run's stream, for the backlog's size.
    private var liveRun = false
    private var runConfiguration: StreamConfiguration?
    /// Copies of stream frames queued for a busy delegate (not discarding late frames, live source).
    private var backlog: BacklogFrames?
    private var backlogFormat: FrameFormat?
    /// Delegate calls queued and not yet returned.
    private let pendingCalls = Atomic<Int>(0)

    /// - Parameters:
    ///   - name: the output's name in statistics and logs.
    ///   - alwaysDiscardsLateVideoFrames: true (the default) drops frames that arrive while the
    ///     delegate is busy; false queues every frame on the delegate's queue instead (a file or
    ///     dump replay reaches the delegate whole). On a live camera a frame queued behind a busy
    ///     delegate, or handed to a ``frames()`` sequence, is a copy in memory of the output's own
    ///     (never the camera's buffer, which the camera and the other outputs need), made for the
    ///     run, up to ``BufferBudget/standard`` (2 s of the stream, in at most 512 MiB or an eighth
    ///     of the machine's memory; an MJPEG frame's decoded picture is copied beside it); past
    ///     it, frames are dropped for this output as ``DropReason/outOfBuffers`` and reported to
    ///     the delegate, as AVFoundation's are. When the output converts (a pixel format asked
    ///     for, a rotation or mirroring: ``setVideoSettings(_:)``), the frames are its pool's
    ///     already, and ``VideoOutputSettings/bufferCount`` bounds them instead.
    public init(name: String = "video-data", alwaysDiscardsLateVideoFrames: Bool = true) {
        self.consumerName = name
        self.discardLate = alwaysDiscardsLateVideoFrames
    }

    /// What the output delivers (AVFoundation's `videoSettings`).
    public var videoSettings: VideoOutputSettings { settingsBox.withLock { $0 } }

    /// Sets the pixel format, rotation and mirroring of the delivered frames; takes effect from
    /// the next frame, also while running. Throws for a format not in
    /// ``availableVideoPixelFormats``, a rotation other than 0, 90, 180, 270, or a buffer count
    /// below 1.
    public func setVideoSettings(_ settings: VideoOutputSettings) throws(FrameConversionError) {
        if let f = settings.pixelFormat, !FrameConverter.outputPixelFormats.contains(f) { throw .unsupportedTarget(f) }
        guard [0, 90, 180, 270].contains(settings.rotation) else { throw .unsupportedRotation(settings.rotation) }
        guard settings.bufferCount >= 1 else { throw .invalidBufferCount(settings.bufferCount) }
        settingsBox.withLock { $0 = settings }
    }

    /// The pixel formats ``setVideoSettings(_:)`` accepts (AVFoundation's
    /// `availableVideoPixelFormatTypes`).
    public var availableVideoPixelFormats: [PixelFormat] { FrameConverter.outputPixelFormats }

    /// The decoders for compressed frames (the session sets the device's own when it starts).
    public func setPixelDecoders(_ decoders: (any PixelDecoderFactory)?) { decodersBox.withLock { $0 = decoders } }

    /// Frames this output did not deliver, by reason (each also reported to the delegate).
    public var droppedFrames: DropCounters { droppedByReason }

    /// Sets the delegate and the queue its callbacks run on.
    public func setDelegate(_ delegate: (any VideoDataOutputDelegate)?, queue: DispatchQueue?) {
        state.withLock { $0.delegate = delegate; $0.queue = queue }
    }

    /// AVFoundation's name for ``setDelegate(_:queue:)`` (the audio data output has both too).
    public func setSampleBufferDelegate(_ delegate: (any VideoDataOutputDelegate)?, queue: DispatchQueue?) {
        setDelegate(delegate, queue: queue)
    }

    /// Frames as an async sequence. With late-frame discarding only the newest unconsumed frame is
    /// kept; otherwise up to 8 are buffered (copies on a live camera, as the delegate's queued
    /// frames are). Each sample buffer gives its frame back when the last reference to it goes.
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

    public var wantsDropNotices: Bool { true }

    public func didDrop(sequence: UInt64, count: UInt64, reason: DropReason) {
        droppedByReason.count(reason, count)
        if reason == .late { lateDrops.add(count, ordering: .relaxed) }
        report(sequence: sequence, count: count, reason: reason)
    }

    private func report(sequence: UInt64, count: UInt64, reason: DropReason) {
        let (delegate, queue) = state.withLock { ($0.delegate, $0.queue) }
        guard let delegate else { return }
        let body: @Sendable () -> Void = { for s in sequence..<(sequence &+ count) { delegate.videoDataOutput(self, didDrop: s, reason: reason) } }
        if let queue { queue.async(execute: body) } else { body() }
    }

    /// Drops a frame at this output (not counted by the engine, which handed it over): counts it,
    /// tells the delegate.
    private func dropHere(_ frame: Frame, _ reason: DropReason) {
        droppedByReason.count(reason)
        if reason == .late { lateDrops.add(1, ordering: .relaxed) }
        report(sequence: frame.sequence, count: 1, reason: reason)
    }

    /// The sample buffer to deliver for `frame`: the frame itself, or its conversion in a buffer
    /// of the output's pool. Nil when the frame is dropped here (reported).
    private func deliverable(_ frame: Frame, connection: CaptureConnection?) -> (buffer: SampleBuffer, isStreamFrame: Bool)? {
        let s = settingsBox.withLock { $0 }
        var rotation = s.rotation, mirrored = s.isMirrored
        if s.followsConnection, let connection { rotation = connection.videoRotationAngle; mirrored = connection.isVideoMirrored }
        // A pixel format asked for is delivered from the output's own pool even when it is the
        // stream's (a copy): the app may then hold its buffers without starving the engine.
        if rotation == 0, !mirrored, s.pixelFormat == nil { return (sampleBuffer(frame), true) }
        let decoders = decodersBox.withLock { $0 }
        if converter == nil || converter!.target != s.pixelFormat || converter!.rotation != rotation || converter!.mirrored != mirrored
            || (decoders == nil) != (decodersForConverter == nil) {
            do { converter = try FrameConverter(target: s.pixelFormat, rotation: rotation, mirrored: mirrored, decoders: decoders) } catch { dropHere(frame, .stage); return nil }
            decodersForConverter = decoders
        }
        let conv = converter!
        let outFormat = conv.outputFormat(for: frame.format)
        if pool == nil || pool!.format != outFormat || pool!.count != s.bufferCount {
            // A sample buffer user code still holds keeps its frame; the retired pool stays (the
            // frame holds it only weakly) so that frame still goes back to it.
            if let old = pool { retiredPools.append(old); if retiredPools.count > 4 { retiredPools.removeFirst() } }
            pool = FramePool(format: outFormat, count: s.bufferCount)
        }
        guard let out = pool!.acquire() else { dropHere(frame, .outOfBuffers); return nil }
        do {
            try conv.convert(frame, into: out)
        } catch {
            out.release()
            dropHere(frame, .corrupt)
            return nil
        }
        return (SampleBuffer(adopting: out), false)
    }

    public func start(configuration: StreamConfiguration) throws {
        liveRun = false
        runConfiguration = configuration
        // The backlog is the run's (sized by its rate).
        backlog = nil
        backlogFormat = nil
    }

    public func willConsume(framesWaiting: Int) { liveRun = true }

    /// A copy of a live stream's `frame` for a delegate still busy with earlier ones or a
    /// ``frames()`` sequence, in the run's backlog (made on first need, again when the frames'
    /// format changes). Nil past the budget.
    private func backlogCopy(_ frame: Frame) -> SampleBuffer? {
        if backlog == nil || backlogFormat != frame.format {
            let interval = runConfiguration.map { $0.interval.nanoseconds } ?? 0
            let budget = BufferBudget.standard
            let limit = max(1, budget.frames(frameBytes: frame.format.maxByteCount, intervalNanoseconds: interval))
            backlog = BacklogFrames(format: frame.format, limit: limit, maximumBytes: max(budget.maximumBytes, frame.format.maxByteCount))
            backlogFormat = frame.format
        }
        return backlog!.copy(frame).map { SampleBuffer(adopting: $0) }
    }

    public func consume(_ frame: Frame) {
        let (delegate, queue, conts, connection) = state.withLock { ($0.delegate, $0.queue, $0.continuations, $0.connection) }
        var toDelegate = delegate != nil
        // The delegate is still busy with earlier frames (its queue is asynchronous): late, or
        // queued behind them.
        let delegateBusy = queue != nil && pendingCalls.load(ordering: .acquiring) > 0
        if toDelegate, discardLate, delegateBusy {
            toDelegate = false
            dropHere(frame, .late)
        }
        guard toDelegate || !conts.isEmpty else { return }
        guard let (converted, isStreamFrame) = deliverable(frame, connection: connection) else { return }
        var buffer = converted
        var toSequences = !conts.isEmpty
        // Kept beyond this call on a live camera — queued behind a busy delegate, or in a
        // sequence's buffer — a frame is a copy, so the camera's buffer goes back to the camera and
        // the other outputs now (the delegate's queue may hold it for seconds). A frame larger
        // than its format says (a rare huge JPEG) goes as it is.
        if !discardLate, liveRun, isStreamFrame, (toDelegate && delegateBusy) || toSequences,
           frame.bytesUsed <= frame.format.maxByteCount {
            if let copy = backlogCopy(frame) {
                buffer = copy
            } else {
                // Past the budget: dropped where it would have been kept (counted once). An idle
                // delegate still gets the frame itself, held for its call only, as it would be
                // with no sequence open.
                droppedByReason.count(.outOfBuffers)
                toSequences = false
                if toDelegate && delegateBusy {
                    toDelegate = false
                    report(sequence: frame.sequence, count: 1, reason: .outOfBuffers)
                }
                guard toDelegate else { return }
            }
        }
        if toSequences {
            for c in conts.values {
                // The sequence's consumer was behind: the older buffer it had not taken is dropped.
                if case .dropped = c.yield(buffer) { lateDrops.add(1, ordering: .relaxed); droppedByReason.count(.late) }
            }
        }
        guard toDelegate, let delegate else { return }
        guard let queue else {
            delegate.videoDataOutput(self, didOutput: buffer, from: connection)
            delivered.add(1, ordering: .relaxed)
            return
        }
        let queued = buffer
        pendingCalls.add(1, ordering: .relaxed)
        queue.async {
            delegate.videoDataOutput(self, didOutput: queued, from: connection)
            self.delivered.add(1, ordering: .relaxed)
            self.pendingCalls.subtract(1, ordering: .releasing)
        }
    }

    public func finish(error: (any Error)?) {
        // The backlog's memory goes with the run (copies the app still holds keep their own).
        backlog = nil
        backlogFormat = nil
        let conts = state.withLock { s -> [AsyncStream<SampleBuffer>.Continuation] in
            let c = Array(s.continuations.values); s.continuations = [:]; return c
        }
        for c in conts { c.finish() }
    }
}
