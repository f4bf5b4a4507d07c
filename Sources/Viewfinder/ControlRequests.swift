import Synchronization

/// One control change a stage asks for: a standard control and its new value, in device units.
public struct ControlRequest: Sendable, Equatable {
    public var control: StandardControl
    public var value: Int64
    public init(_ control: StandardControl, _ value: Int64) { self.control = control; self.value = value }
}

/// Control changes on their way from the stage thread to the capture side.
///
/// Stages call ``request(_:to:)`` in ``Stage/process(_:)``: a push on a preallocated lock-free
/// single-producer/single-consumer ring — no syscall, no lock, no allocation. The capture side (the
/// engine's capture thread, which is the V4L2 camera's and the sim camera's) calls
/// ``apply(to:afterFrame:delayed:)`` between frames: it takes everything queued, keeps the latest
/// value of each control, writes them to the device (an ioctl; a USB control transfer on UVC) and
/// records each write in a ``DelayedControls`` so that frames carry the values they were exposed
/// with. A slow control write therefore delays capture of the next frame at most, never the stages.
///
/// One thread requests (the stage thread), one applies.
public final class ControlRequestQueue: @unchecked Sendable {
    // @unchecked Sendable: the ring is SPSC; `latest` is touched by the applying thread only.
    private let ring: SPSCRing<ControlRequest>
    private let droppedCount = Atomic<UInt64>(0)
    private let appliedCount = Atomic<UInt64>(0)
    private let failedCount = Atomic<UInt64>(0)
    /// Latest value per control of one drain (indexed by ``StandardControl/index``).
    private var latest: [Int64?]

    /// Every standard control, in the order writes are made (built once: `allCases` allocates).
    static let order: [StandardControl] = StandardControl.allCases

    /// A queue for up to `capacity` requests between two drains (a power of two).
    public init(capacity: Int = 64) {
        ring = SPSCRing(capacity: capacity)
        latest = Array(repeating: nil, count: StandardControl.allCases.count)
    }

    /// Queues a change (stage thread). False when the queue is full: the request is dropped and
    /// counted (``dropped``); the stage's next request for that control supersedes it anyway.
    @inline(__always) @discardableResult
    public func request(_ control: StandardControl, to value: Int64) -> Bool {
        if ring.push(ControlRequest(control, value)) != nil {
            droppedCount.add(1, ordering: .relaxed)
            return false
        }
        return true
    }

    /// Requests dropped because the queue was full.
    public var dropped: UInt64 { droppedCount.load(ordering: .relaxed) }
    /// Control writes made.
    public var applied: UInt64 { appliedCount.load(ordering: .relaxed) }
    /// Control writes the device refused.
    public var failed: UInt64 { failedCount.load(ordering: .relaxed) }
    /// Requests waiting.
    public var pending: Int { ring.count }

    /// Writes every queued change to `controls` (capture side, between frames): the latest value of
    /// each control, one write each. `frame` is the sequence of the last frame the source handed
    /// out (nil before the first); each write is recorded in `delayed` as taking effect
    /// ``DeviceControlling/controlLatencyFrames`` frames later. Returns the writes made.
    @discardableResult
    public func apply(to controls: any DeviceControlling, afterFrame frame: UInt64?, delayed: DelayedControls? = nil) -> Int {
        var any = false
        while let r = ring.pop() {
            latest[r.control.index] = r.value
            any = true
        }
        guard any else { return 0 }
        var n = 0
        for c in ControlRequestQueue.order {
            guard let v = latest[c.index] else { continue }
            latest[c.index] = nil
            do {
                try controls.set(c, to: v)
                delayed?.record(c, v, afterFrame: frame)
                appliedCount.add(1, ordering: .relaxed)
                n += 1
            } catch {
                failedCount.add(1, ordering: .relaxed)
            }
        }
        return n
    }
}

/// Control values one frame was exposed with, in device units (as ``StandardControl`` describes
/// them); nil where unknown.
public struct ExposedControls: Sendable, Equatable, Codable {
    /// `exposure_time_absolute`, 100 µs units.
    public var exposureTime: Int64?
    /// `gain`, device units.
    public var gain: Int64?
    /// `focus_absolute`, device units.
    public var focus: Int64?
    public init(exposureTime: Int64? = nil, gain: Int64? = nil, focus: Int64? = nil) {
        self.exposureTime = exposureTime; self.gain = gain; self.focus = focus
    }
    public var isEmpty: Bool { exposureTime == nil && gain == nil && focus == nil }

    /// The value of a tracked control.
    public subscript(control: StandardControl) -> Int64? {
        get {
            switch control {
            case .exposureTime: return exposureTime
            case .gain: return gain
            case .focusAbsolute: return focus
            default: return nil
            }
        }
        set {
            switch control {
            case .exposureTime: exposureTime = newValue
            case .gain: gain = newValue
            case .focusAbsolute: focus = newValue
            default: break
            }
        }
    }

    /// The controls a frame's metadata tracks.
    public static let tracked: [StandardControl] = [.exposureTime, .gain, .focusAbsolute]
}

/// Which frame a control write takes effect on, after libcamera's `DelayedControls`: a device
/// applies a write `latency` frames after the last frame it handed out (its known control latency;
/// ``DeviceControlling/controlLatencyFrames``), so the values a frame was exposed with are the
/// last written with an effective frame at or before it. Capture side only; fixed storage, no
/// allocation per frame.
public final class DelayedControls: @unchecked Sendable {
    // @unchecked Sendable: used by one thread at a time (set up before the capture thread starts,
    // then only by it).
    private struct Write { var from: UInt64; var value: Int64; var relative: Bool }
    public let latency: Int
    private static let depth = 16
    /// Per tracked control: the value in effect and writes still to land, oldest first.
    private var current = ExposedControls()
    private var writes: [[Write]]
    private var firstFrame: UInt64?

    public init(latency: Int) {
        self.latency = max(0, latency)
        writes = ExposedControls.tracked.map { _ in
            var a: [Write] = []
            a.reserveCapacity(DelayedControls.depth)
            return a
        }
    }

    /// Starts over from the values in effect now (read from the device before streaming).
    public func reset(_ values: ExposedControls) {
        current = values
        for i in writes.indices { writes[i].removeAll(keepingCapacity: true) }
        firstFrame = nil
    }

    /// Records a write of `value` made after frame `frame` was handed out (nil: before the first
    /// frame, which then is the first it can affect, `latency - 1` frames on).
    public func record(_ control: StandardControl, _ value: Int64, afterFrame frame: UInt64?) {
        guard let k = ExposedControls.tracked.firstIndex(of: control) else { return }
        let from = frame.map { $0 &+ UInt64(latency) } ?? (firstFrame ?? 0) &+ UInt64(max(0, latency - 1))
        if writes[k].count == DelayedControls.depth { writes[k].removeFirst() }
        // A later write landing no later than an earlier one supersedes it.
        while let last = writes[k].last, last.from >= from { writes[k].removeLast() }
        writes[k].append(Write(from: from, value: value, relative: frame == nil && firstFrame == nil))
    }

    /// The values frame `sequence` was exposed with. Call in frame order.
    public func values(forFrame sequence: UInt64) -> ExposedControls {
        if firstFrame == nil {
            // Writes before the first frame count from it.
            firstFrame = sequence
            for k in writes.indices { for j in writes[k].indices where writes[k][j].relative { writes[k][j].from &+= sequence } }
        }
        for (k, c) in ExposedControls.tracked.enumerated() {
            while let w = writes[k].first, w.from <= sequence {
                current[c] = w.value
                writes[k].removeFirst()
            }
        }
        return current
    }
}

extension StandardControl {
    /// Position among `allCases`, for tables indexed by control.
    @inline(__always)
    public var index: Int {
        switch self {
        case .exposureAuto: return 0
        case .exposureTime: return 1
        case .gain: return 2
        case .focusAuto: return 3
        case .focusAbsolute: return 4
        case .whiteBalanceAuto: return 5
        case .whiteBalanceTemperature: return 6
        case .powerLineFrequency: return 7
        case .brightness: return 8
        case .contrast: return 9
        case .saturation: return 10
        case .flashLEDMode: return 11
        case .flashStrobeSource: return 12
        case .flashStrobe: return 13
        case .flashStrobeStop: return 14
        case .flashIntensity: return 15
        case .torchIntensity: return 16
        case .flashFault: return 17
        case .zoomAbsolute: return 18
        }
    }
}
