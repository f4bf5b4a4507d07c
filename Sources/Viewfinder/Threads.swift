#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A joinable OS thread with a name (visible in `top -H` and debuggers).
///
/// The engine runs a fixed, small set of long-lived threads (capture, stages, one per sink), so a
/// thread per role is right here; nothing is spawned per frame.
public final class EngineThread: @unchecked Sendable {
    // @unchecked Sendable: `handle` is written once in init before any other thread sees `self`,
    // and `joined` is only touched by the thread that calls `join()`.
    private var handle = pthread_t()
    private var joined = false
    public let name: String

    private final class Box { let body: () -> Void; let name: String; init(_ n: String, _ b: @escaping () -> Void) { name = n; body = b } }

    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        self.name = name
        let box = Unmanaged.passRetained(Box(name, body)).toOpaque()
        let rc = pthread_create(&handle, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            // Linux limits thread names to 15 bytes.
            Thread.current.name = String(box.name.prefix(15))
            box.body()
            return nil
        }, box)
        precondition(rc == 0, "pthread_create failed: \(rc)")
    }

    /// Waits for the thread to end. Safe to call more than once from one thread.
    public func join() {
        guard !joined else { return }
        joined = true
        pthread_join(handle, nil)
    }

    /// For a thread nobody will join (it ends by itself after handing over, or it is abandoned
    /// where joining could deadlock): its resources go when it ends. Called, like `join()`, by
    /// the one owner of the thread, instead of `join()`; the thread itself may call it.
    public func detach() {
        guard !joined else { return }
        joined = true
        pthread_detach(handle)
    }
}
