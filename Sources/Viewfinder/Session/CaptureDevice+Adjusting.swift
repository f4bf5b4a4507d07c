// MARK: - Adjusting state (AVFoundation's isAdjustingExposure/Focus/WhiteBalance, observed by key-value there)

/// Which of a device's control loops are moving (AVFoundation's `isAdjustingExposure`,
/// `isAdjustingFocus`, `isAdjustingWhiteBalance`), as the latest frame the session's control
/// stages saw reports them: a loop is adjusting when its frame state is
/// `ControlLoopState.adjusting` or `.scanning` (focus sweeping the lens).
public struct DeviceAdjustingState: Sendable, Equatable, Hashable, CustomStringConvertible {
    public var isAdjustingExposure: Bool
    public var isAdjustingFocus: Bool
    public var isAdjustingWhiteBalance: Bool
    public init(isAdjustingExposure: Bool = false, isAdjustingFocus: Bool = false, isAdjustingWhiteBalance: Bool = false) {
        self.isAdjustingExposure = isAdjustingExposure
        self.isAdjustingFocus = isAdjustingFocus
        self.isAdjustingWhiteBalance = isAdjustingWhiteBalance
    }
    init(bits: UInt8) { self.init(isAdjustingExposure: bits & 1 != 0, isAdjustingFocus: bits & 2 != 0, isAdjustingWhiteBalance: bits & 4 != 0) }
    public var description: String {
        "exposure \(isAdjustingExposure ? "adjusting" : "settled"), focus \(isAdjustingFocus ? "adjusting" : "settled"), white balance \(isAdjustingWhiteBalance ? "adjusting" : "settled")"
    }
}

/// The streams handed out for one kind of device event (``CaptureDevice/stateChanges``,
/// ``CaptureDevice/subjectAreaChanges``): each access makes a stream, each event goes to every
/// stream still being read, and a stream whose reader stopped is forgotten.
final class EventStreams<Element: Sendable>: Sendable {
    private struct Registry {
        var next = 0
        var continuations: [Int: AsyncStream<Element>.Continuation] = [:]
    }
    private let registry = LockedBox(Registry())
    private let buffering: Int
    init(bufferingNewest n: Int) { buffering = n }

    func makeStream() -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(buffering))
        let id = registry.withLock { r -> Int in
            r.next += 1
            r.continuations[r.next] = continuation
            return r.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.registry.withLock { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    func yield(_ e: Element) {
        for c in registry.withLock({ Array($0.continuations.values) }) { c.yield(e) }
    }
}

extension CaptureDevice {
    /// The loops adjusting on the latest frame (all false before any frame, and when no session runs stages).
    public var adjustingState: DeviceAdjustingState { DeviceAdjustingState(bits: adjustingBits.load(ordering: .relaxed)) }
    /// Whether the exposure loop is moving (AVFoundation's `isAdjustingExposure`).
    public var isAdjustingExposure: Bool { adjustingState.isAdjustingExposure }
    /// Whether the focus loop is moving the lens (AVFoundation's `isAdjustingFocus`).
    public var isAdjustingFocus: Bool { adjustingState.isAdjustingFocus }
    /// Whether the white-balance loop is moving (AVFoundation's `isAdjustingWhiteBalance`).
    public var isAdjustingWhiteBalance: Bool { adjustingState.isAdjustingWhiteBalance }

    /// The device's ``adjustingState`` each time it changes (AVFoundation observes these by
    /// key-value observing): a new stream per access, yielding only on a change, from the frame
    /// that changed it (no polling: the session's control stages report each frame's loop states,
    /// and only a change takes a lock and yields). Buffers the newest 64 changes for a slow reader;
    /// ends when the reader stops iterating (cancellation).
    public var stateChanges: AsyncStream<DeviceAdjustingState> { stateStreams.makeStream() }

    /// Records the frame's loop states (stage thread): one relaxed exchange per frame; on a change,
    /// yields to the ``stateChanges`` streams.
    /// Returns whether any loop is moving.
    @discardableResult
    func noteLoops(exposure: ControlLoopState?, focus: ControlLoopState?, whiteBalance: ControlLoopState?) -> Bool {
        func moving(_ s: ControlLoopState?) -> Bool { s == .adjusting || s == .scanning }
        let bits: UInt8 = (moving(exposure) ? 1 : 0) | (moving(focus) ? 2 : 0) | (moving(whiteBalance) ? 4 : 0)
        guard adjustingBits.exchange(bits, ordering: .relaxed) != bits else { return bits != 0 }
        stateStreams.yield(DeviceAdjustingState(bits: bits))
        return bits != 0
    }

    // MARK: Subject-area change

    /// Whether the session watches the metered area for a change of subject (AVFoundation's
    /// `isSubjectAreaChangeMonitoringEnabled`); off by default. See ``subjectAreaChanges``.
    public var isSubjectAreaChangeMonitoringEnabled: Bool { subjectAreaMonitoring.load(ordering: .relaxed) }

    /// Turns subject-area change monitoring on or off (needs the configuration lock, as in
    /// AVFoundation; takes effect at once, from the next frame).
    /// - Throws: `SessionError.notLockedForConfiguration`.
    public func setSubjectAreaChangeMonitoringEnabled(_ on: Bool) throws {
        guard isLockedForConfiguration else { throw SessionError.notLockedForConfiguration(device: uniqueID) }
        subjectAreaMonitoring.store(on, ordering: .relaxed)
    }

    /// One element per subject-area change (AVFoundation's `subjectAreaDidChangeNotification`):
    /// while monitoring is on, when the metered area's mean luma (the exposure stage's
    /// `meteredLuma`), or its contrast (the focus stage's Tenengrad, when focus runs), differs by
    /// more than ``subjectAreaChangeThreshold`` from its value when the loops last settled (no loop
    /// adjusting, luma steady within 5 % over 3 frames). After a change the reference is taken
    /// again at the next settling, so one change fires once. Needs the exposure stage (any
    /// exposure mode but `.locked`). A new stream per access; ends when its reader stops.
    public var subjectAreaChanges: AsyncStream<Void> { subjectAreaStreams.makeStream() }

    /// Relative change of the metered luma or contrast that counts as a new subject (20 %, as AVFoundation).
    public static let subjectAreaChangeThreshold = 0.2

    func postSubjectAreaChange() { subjectAreaStreams.yield(()) }
}

/// Subject-area change detection over a session's frames (stage thread): a reference luma and
/// contrast taken when the loops have settled, and a change beyond the threshold fires once.
struct SubjectAreaMonitor {
    private var reference: (luma: Double, contrast: Double?)?
    private var lastLuma = -1.0
    private var steadyFrames = 0

    /// Feeds one frame; true when it shows a subject-area change.
    mutating func update(luma: Double, contrast: Double?, adjusting: Bool) -> Bool {
        defer { lastLuma = luma }
        guard luma.isFinite, luma >= 0 else { return false }
        steadyFrames = !adjusting && abs(luma - lastLuma) <= 0.05 * max(lastLuma, 1) ? steadyFrames + 1 : 0
        // The comparison runs whatever the loops do (the frame that shows the change is often the
        // first the exposure loop adjusts on); a reference is taken only once they have settled.
        guard let ref = reference else {
            if steadyFrames >= 3 { reference = (luma, contrast) }
            return false
        }
        let t = CaptureDevice.subjectAreaChangeThreshold
        let lumaChanged = abs(luma - ref.luma) > t * max(ref.luma, 1)
        var contrastChanged = false
        if let c0 = ref.contrast, let c = contrast, c0 > 0 { contrastChanged = abs(c - c0) > t * c0 }
        guard lumaChanged || contrastChanged else { return false }
        reference = nil
        steadyFrames = 0
        return true
    }
}
