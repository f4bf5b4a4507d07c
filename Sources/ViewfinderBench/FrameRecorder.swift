import ViewfinderKit

/// What the bench reads from one frame's pictures to see a control take effect.
public enum PictureMeasure: String, Codable, Sendable {
    /// Mean luma of the whole frame (every 4th sample), 0–255: exposure, gain, brightness.
    case luma
    /// Variance of the Laplacian of the centre half of the frame (luma²): focus.
    case focus

    /// The measure of `frame`'s pixels, or nil when it has no luma (an undecoded MJPEG frame).
    public func value(of frame: Frame) -> Double? {
        guard let pf = frame.pixelFrame, let luma = LumaView(pf) else { return nil }
        switch self {
        case .luma:
            return LumaStatistics.mean(luma, step: 4)
        case .focus:
            let r = PixelRect(x: luma.width / 4, y: luma.height / 4, width: luma.width / 2, height: luma.height / 2)
            return FocusMeasures.laplacianVariance(luma, region: r).variance
        }
    }
}

/// What the recorder keeps of one frame: its sequence and times (CLOCK_MONOTONIC ns) and, in a
/// control run, the picture measure the current step watches.
public struct FrameSample: Sendable, Equatable {
    public var sequence: UInt64
    /// The frame's capture timestamp from the source.
    public var timestamp: UInt64
    /// When the engine's capture thread got it from the source.
    public var received: UInt64
    /// When the recorder (a sink at the end of the pipeline) got it.
    public var consumed: UInt64
    /// The picture measure (control runs only).
    public var measure: Double?
}

/// A sink that records every frame it is given (sequence, timestamps, optionally a picture
/// measure) and, in a control run, steps device controls from its own thread right after a frame
/// arrives, so each step has a well-defined reference frame (see ``ControlStepper``).
///
/// Storage is reserved up front for `capacity` frames; frames beyond it are counted in
/// ``overflow``, not stored. Thread-safe: the consumer thread writes, readers take the lock.
public final class FrameRecorder: FrameConsumer, CaptureOutput, Sendable {
    public let consumerName: String
    public let needsPixels: Bool
    public var acceptedMediaTypes: Set<MediaType> { [.video] }
    /// A deep ring: the recorder must not drop what it measures when the scheduler is slow.
    public var ringCapacity: Int { 32 }

    private struct State {
        var samples: [FrameSample] = []
        var overflow = 0
        var stepper: ControlStepper?
        /// Sequences the pipeline dropped before they reached the recorder (first, count).
        var pipelineDrops: [(UInt64, UInt64)] = []
    }
    private let state: LockedBox<State>
    private let capacity: Int
    private let fullAction = LockedBox<(@Sendable () -> Void)?>(nil)

    /// Runs `action` once, on the consumer's thread, when the first frame finds the storage full
    /// (the bench ends its run there: what it reports covers the frames it kept).
    public func whenFull(_ action: @escaping @Sendable () -> Void) { fullAction.withLock { $0 = action } }

    /// A recorder for up to `capacity` frames; with `stepper`, a control run (it needs pixels).
    public init(name: String = "bench", capacity: Int, stepper: ControlStepper? = nil) {
        consumerName = name
        self.capacity = max(1, capacity)
        needsPixels = stepper != nil
        var s = State()
        s.samples.reserveCapacity(self.capacity)
        s.stepper = stepper
        state = LockedBox(s)
    }

    public func consume(_ frame: Frame) {
        let now = monotonicNanoseconds()
        let firstOverflow = state.withLock { s -> Bool in
            var sample = FrameSample(sequence: frame.sequence, timestamp: frame.timestamp.nanoseconds, received: frame.receiveTime, consumed: now)
            if let measure = s.stepper?.currentMeasure { sample.measure = measure.value(of: frame) }
            var first = false
            if s.samples.count < capacity { s.samples.append(sample) } else { s.overflow += 1; first = s.overflow == 1 }
            s.stepper?.frameArrived(sequence: frame.sequence, measure: sample.measure)
            return first
        }
        if firstOverflow, let action = fullAction.withLock({ $0 }) { action() }
    }

    public var wantsDropNotices: Bool { true }

    /// Frames the pipeline dropped on their way here — a stage, a full ring, a late frame, no
    /// buffer, storage — are not the camera's gaps; they are kept apart so the camera's timing
    /// counts only what the camera lost (`driver_gap`, `corrupt`). Bounded like the samples.
    public func didDrop(sequence: UInt64, count: UInt64, reason: DropReason) {
        guard Self.isPipelineDrop(reason) else { return }
        state.withLock { s in
            if let last = s.pipelineDrops.last, last.0 &+ last.1 == sequence {
                s.pipelineDrops[s.pipelineDrops.count - 1].1 += count
            } else if s.pipelineDrops.count < capacity {
                s.pipelineDrops.append((sequence, count))
            }
        }
    }

    /// Whether a drop happened in the pipeline rather than at the camera.
    static func isPipelineDrop(_ reason: DropReason) -> Bool {
        switch reason {
        case .driverGap, .corrupt: return false
        case .late, .ringFull, .outOfBuffers, .stage, .storageBacklog: return true
        }
    }

    /// The sequences the pipeline dropped (first, count), in the order they were reported.
    public var pipelineDrops: [(first: UInt64, count: UInt64)] { state.withLock { $0.pipelineDrops.map { (first: $0.0, count: $0.1) } } }

    /// The frames recorded so far, in arrival order.
    public var samples: [FrameSample] { state.withLock { $0.samples } }
    /// Frames that arrived after the storage was full (not in ``samples``).
    public var overflow: Int { state.withLock { $0.overflow } }
    /// The stepper's results (control runs), once it is done or the run ended.
    public var steps: [ControlStep] { state.withLock { $0.stepper?.steps ?? [] } }
    /// Whether every planned step has been made and observed.
    public var stepsDone: Bool { state.withLock { $0.stepper?.isDone ?? true } }
    /// Steps done so far, in the plan's order (``ControlStepper/completed``).
    public var stepsCompleted: Int { state.withLock { $0.stepper?.completed ?? 0 } }
}
