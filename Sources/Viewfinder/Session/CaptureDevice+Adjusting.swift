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

/// The continuations of a device's ``CaptureDevice/stateChanges`` streams.
struct StateObservers {
    var next = 0
    var continuations: [Int: AsyncStream<DeviceAdjustingState>.Continuation] = [:]
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
    public var stateChanges: AsyncStream<DeviceAdjustingState> {
        let (stream, continuation) = AsyncStream<DeviceAdjustingState>.makeStream(bufferingPolicy: .bufferingNewest(64))
        let id = stateObservers.withLock { o -> Int in
            o.next += 1
            o.continuations[o.next] = continuation
            return o.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.stateObservers.withLock { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    /// Records the frame's loop states (stage thread): one relaxed exchange per frame; on a change,
    /// yields to the ``stateChanges`` streams.
    func noteLoops(exposure: ControlLoopState?, focus: ControlLoopState?, whiteBalance: ControlLoopState?) {
        func moving(_ s: ControlLoopState?) -> Bool { s == .adjusting || s == .scanning }
        let bits: UInt8 = (moving(exposure) ? 1 : 0) | (moving(focus) ? 2 : 0) | (moving(whiteBalance) ? 4 : 0)
        guard adjustingBits.exchange(bits, ordering: .relaxed) != bits else { return }
        let state = DeviceAdjustingState(bits: bits)
        let observers = stateObservers.withLock { Array($0.continuations.values) }
        for c in observers { c.yield(state) }
    }
}
