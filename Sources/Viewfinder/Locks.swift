import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A value behind a mutex, shareable between threads.
public final class LockedBox<Value: ~Copyable>: Sendable {
    private let mutex: Mutex<Value>
    public init(_ value: consuming sending Value) { mutex = Mutex(value) }
    @inline(__always)
    public func withLock<R, E: Error>(_ body: (inout sending Value) throws(E) -> sending R) throws(E) -> sending R {
        try mutex.withLock(body)
    }
}

/// A pthread mutex and condition variable, for the few places that must block: a producer waiting
/// for room, a consumer waiting for work, a pool waiting for a buffer.
///
/// `@unchecked Sendable`: the pthread objects are heap-allocated once, never moved, and all access
/// goes through the pthread calls, which are thread-safe by contract.
public final class ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let cond: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        mutex = .allocate(capacity: 1)
        cond = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        cond.deallocate()
    }

    @inline(__always) public func lock() { pthread_mutex_lock(mutex) }
    @inline(__always) public func unlock() { pthread_mutex_unlock(mutex) }

    @inline(__always)
    public func withLock<R>(_ body: () throws -> R) rethrows -> R {
        lock(); defer { unlock() }
        return try body()
    }

    /// Waits (with the lock held) until signalled or until `deadline` on CLOCK_MONOTONIC.
    /// Returns false on timeout.
    @discardableResult
    public func wait(untilMonotonicNanoseconds deadline: UInt64) -> Bool {
        var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(cond, mutex, &ts) != ETIMEDOUT
    }

    public func wait() { pthread_cond_wait(cond, mutex) }
    public func signal() { pthread_cond_signal(cond) }
    public func broadcast() { pthread_cond_broadcast(cond) }
}
