import Synchronization

/// A fixed set of preallocated frames, recycled by reference count.
///
/// ``acquire()`` hands out a frame with one reference; when the last holder calls
/// ``Frame/release()`` the frame comes back. In steady state nothing is allocated: the free list
/// is an array whose capacity is reserved up front.
public final class FramePool: FrameRecycler, @unchecked Sendable {
    // @unchecked Sendable: `free` is only touched with `lock` held.
    public let format: FrameFormat
    public let frameCapacity: Int
    public let count: Int
    private var free: [Frame]
    private var all: [Frame]
    private let lock = ConditionLock()
    private var waiters = 0

    /// Creates `count` frames big enough for `format` (or `frameCapacity` bytes if larger).
    public init(format: FrameFormat, count: Int, frameCapacity: Int? = nil) {
        precondition(count > 0, "a pool needs at least one frame")
        self.format = format
        self.count = count
        self.frameCapacity = max(frameCapacity ?? 0, format.maxByteCount)
        free = []
        free.reserveCapacity(count)
        all = []
        // Frames point back at the pool through `recycler`, so they are built once `self` exists.
        all = (0..<count).map { Frame(capacity: self.frameCapacity, format: format, index: $0, recycler: self) }
        free.append(contentsOf: all.reversed())
    }

    /// Frames currently free.
    public var available: Int { lock.withLock { free.count } }

    /// A free frame with one reference, or nil when every frame is in use (count it as
    /// ``DropReason/outOfBuffers``).
    @inline(__always)
    public func acquire() -> Frame? {
        lock.lock()
        let f = free.popLast()
        lock.unlock()
        guard let f else { return nil }
        f.retain()
        f.reset()
        return f
    }

    /// Waits up to `timeoutNanoseconds` for a free frame (for non-live sources, which apply
    /// back-pressure instead of dropping).
    public func acquire(timeoutNanoseconds: UInt64) -> Frame? {
        let deadline = monotonicNanoseconds() &+ timeoutNanoseconds
        lock.lock()
        while free.isEmpty {
            waiters += 1
            let ok = lock.wait(untilMonotonicNanoseconds: deadline)
            waiters -= 1
            if !ok && free.isEmpty { lock.unlock(); return nil }
        }
        let f = free.removeLast()
        lock.unlock()
        f.retain()
        f.reset()
        return f
    }

    public func recycle(_ frame: Frame) {
        lock.lock()
        free.append(frame)
        if waiters > 0 { lock.signal() }
        lock.unlock()
    }
}
