#if canImport(Glibc)
import Glibc
#endif

/// A value behind a mutex, shareable between threads.
///
/// A pthread mutex rather than the standard library's `Synchronization.Mutex`: on Linux that
/// one locks with futex calls inside the (uninstrumented) runtime, so ThreadSanitizer does not see
/// it as a lock and reports every access it guards from two threads as a race (measured: four
/// threads appending under one `Mutex` give "Swift access race" reports). TSan intercepts
/// `pthread_mutex_lock`, so what this box guards is checked, not flagged. Uncontended, both are an
/// atomic exchange each way; the mutex is allocated once, with the box.
///
/// `@unchecked Sendable`: `value` is only reached inside `withLock`, under the mutex.
public final class LockedBox<Value: ~Copyable>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private nonisolated(unsafe) var value: Value

    public init(_ value: consuming sending Value) {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        self.value = value
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inline(__always)
    public func withLock<R, E: Error>(_ body: (inout sending Value) throws(E) -> sending R) throws(E) -> sending R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
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
