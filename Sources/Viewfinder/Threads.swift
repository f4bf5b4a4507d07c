#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A joinable OS thread with a name (visible in `top -H` and debuggers).
///
/// The engine runs a fixed, small set of long-lived threads (capture, stages, one per sink), so a
/// thread per role is right here; nothing is spawned per frame.
public final class EngineThread: @unchecked Sendable {
    // @unchecked Sendable: `handle` is written once in init before any other thread sees `self`;
    // `ending` is only touched under `endLock`.
    private var handle = pthread_t()
    private enum Ending { case none, joining, ended }
    /// Whether someone joins (or joined, or detached) the thread. A second caller of `join()`
    /// waits for the first one's `pthread_join` instead of joining a reaped thread: a session's
    /// `waitUntilFinished()` and a `stopRunning()` on another thread both join the engine's
    /// threads, and a second `pthread_join` of one thread is undefined — glibc waited forever on
    /// the reaped thread's id (`viewfinder run --output -` whose reader closed the pipe hung 1 run
    /// in 40, and a CI run with it, 26 Nov).
    private var ending = Ending.none
    private let endLock = ConditionLock()
    public let name: String

    private final class Box { let body: () -> Void; let name: String; init(_ n: String, _ b: @escaping () -> Void) { name = n; body = b } }

    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        self.name = name
        let box = Unmanaged.passRetained(Box(name, body)).toOpaque()
        let rc = pthread_create(&handle, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            // Linux limits thread names to 15 bytes.
            Thread.current.name = String(box.name.prefix(15))
            Thread.current.threadDictionary[EngineThread.marker] = true
            box.body()
            return nil
        }, box)
        precondition(rc == 0, "pthread_create failed: \(rc)")
    }

    static let marker = "viewfinder.engine-thread"

    /// Whether the calling thread is one of Viewfinder's own (an engine's capture, stage, decode or
    /// consumer thread, a session's watcher): one that must not wait for an engine to end.
    static var isCurrent: Bool { Thread.current.threadDictionary[marker] != nil }

    /// Waits for the thread to end. Safe to call any number of times, from any threads at once:
    /// every caller returns once the thread has ended (after a ``detach()``, at once). From the
    /// thread itself (a stop requested from inside the run) it cannot wait: the thread is
    /// detached instead, so its resources still go when it ends, and the call returns.
    public func join() {
        endLock.lock()
        switch ending {
        case .ended:
            endLock.unlock()
        case .joining:
            while ending != .ended { endLock.wait() }
            endLock.unlock()
        case .none:
            ending = .joining
            endLock.unlock()
            // From the thread itself: detached, not joined (a self-join is an error for glibc,
            // and ThreadSanitizer's interceptor forgets the thread on it).
            if pthread_equal(pthread_self(), handle) != 0 { pthread_detach(handle) } else { pthread_join(handle, nil) }
            endLock.withLock { ending = .ended }
            endLock.broadcast()
        }
    }

    /// For a thread nobody will join (it ends by itself after handing over, or it is abandoned
    /// where joining could deadlock): its resources go when it ends. Instead of `join()`; the
    /// thread itself may call it. Never blocks; a no-op once a join began or the thread was
    /// detached (the joiner reaps it).
    public func detach() {
        endLock.withLock {
            guard ending == .none else { return }
            pthread_detach(handle)
            ending = .ended
        }
    }
}
