import Dispatch

/// What a session reports while it runs.
public enum SessionEvent: Sendable, CustomStringConvertible {
    case didStartRunning
    /// The engine stopped: ``CaptureSession/stopRunning()``, a frame or duration limit, the end of a
    /// finite source (a file, a dump, a sim camera with `frames=`), or a runtime error.
    case didStopRunning
    /// The stream ended with an error (a disconnected camera, a stalled stream, a sink failure),
    /// with its type kept: match it (`if case .runtimeError(let e as DeviceError) = event`).
    case runtimeError(any Error)
    /// The device became unavailable (disconnected, taken by another program).
    case wasInterrupted(reason: InterruptionReason)
    /// The device is back; the session starts running again by itself.
    case interruptionEnded

    public var description: String {
        switch self {
        case .didStartRunning: return "did start running"
        case .didStopRunning: return "did stop running"
        case .runtimeError(let e): return "runtime error: \(e)"
        case .wasInterrupted(let r): return "interrupted: \(r)"
        case .interruptionEnded: return "interruption ended"
        }
    }

    /// The error of a ``runtimeError(_:)`` event.
    public var error: (any Error)? {
        if case .runtimeError(let e) = self { return e }
        return nil
    }
}

/// Why a session was interrupted (AVFoundation's `AVCaptureSession.InterruptionReason`).
public enum InterruptionReason: String, Sendable, Equatable, CustomStringConvertible {
    /// The camera was unplugged or its driver went away.
    case videoDeviceNotAvailable = "video device not available"
    /// The microphone was unplugged or its driver went away (the video goes on).
    case audioDeviceNotAvailable = "audio device not available"
    public var description: String { rawValue }
}

/// Delivers a session's events to its handlers, in order, one at a time, on a serial queue of its
/// own — never on the caller's thread and never with the session's lock held, so a handler may
/// call back into the session (read its configuration, `stopRunning()`, `startRunning()`).
final class SessionEventHub: Sendable {
    private let queue = DispatchQueue(label: "viewfinder.session.events")
    private let key = DispatchSpecificKey<Bool>()
    private let handlers = LockedBox<[@Sendable (SessionEvent) -> Void]>([])

    init() { queue.setSpecific(key: key, value: true) }

    func add(_ handler: @escaping @Sendable (SessionEvent) -> Void) {
        handlers.withLock { $0.append(handler) }
    }

    /// Queues `event` for delivery.
    func post(_ event: SessionEvent) {
        let handlers = self.handlers
        queue.async { for h in handlers.withLock({ $0 }) { h(event) } }
    }

    /// Waits until every event posted so far has been delivered (returns at once on the event
    /// queue itself, where waiting would never end).
    func drain() {
        guard DispatchQueue.getSpecific(key: key) == nil else { return }
        queue.sync {}
    }
}
