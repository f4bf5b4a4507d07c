/// A source that can come back after ``DeviceError/disconnected(device:)``: a camera unplugged
/// and plugged in again. While a session is interrupted it calls ``reconnect()`` every
/// ``CaptureSession/reconnectIntervalSeconds``; once it succeeds the session reports
/// ``SessionEvent/interruptionEnded`` and starts running again with its configuration.
public protocol ReconnectableSource: CaptureSource {
    /// Opens the device again; throws while it is still absent.
    func reconnect() throws
}

/// Watches an interrupted session's device until it comes back or the session is stopped.
final class InterruptionWatcher: Sendable {
    private let cancelled = LockedBox(false)
    private let thread = LockedBox<EngineThread?>(nil)

    /// Polls `source.reconnect()` every `interval` seconds until it succeeds (then calls
    /// `resume`, on the watcher's thread) or until ``cancel()``.
    init(source: any ReconnectableSource, intervalSeconds: Double, resume: @escaping @Sendable () -> Void) {
        let cancelled = self.cancelled
        let t = EngineThread(name: "vf-reconnect") {
            while !cancelled.withLock({ $0 }) {
                sleepUntil(monotonicNanoseconds: monotonicNanoseconds() &+ UInt64(intervalSeconds * 1e9))
                if cancelled.withLock({ $0 }) { return }
                if (try? source.reconnect()) != nil { resume(); return }
            }
        }
        thread.withLock { $0 = t }
    }

    var isCancelled: Bool { cancelled.withLock { $0 } }

    /// Stops watching (the watcher may still be finishing one attempt).
    func cancel() { cancelled.withLock { $0 = true } }

    /// Waits for the watcher's thread to end (never call it from that thread).
    func join() { thread.withLock { $0 }?.join() }

    /// Lets the watcher's thread end on its own, unjoined (from that thread after it resumed the
    /// session, or where joining under the session's locks could deadlock).
    func detach() { thread.withLock { $0 }?.detach() }
}
