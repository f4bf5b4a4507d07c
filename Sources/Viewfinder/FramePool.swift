import Synchronization

/// A fixed set of preallocated frames, recycled by reference count.
///
/// Inside the engine `acquire()` hands out a frame with one reference; when its last holder lets
/// go the frame comes back. Outside it, ``lease()`` hands out a ``FrameLease``: `~Copyable`, so the
/// frame has exactly one owner and goes back exactly once, when the lease ends. In steady state
/// nothing is allocated: the free list is an array whose capacity is reserved up front.
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
    package func acquire() -> Frame? {
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
    package func acquire(timeoutNanoseconds: UInt64) -> Frame? {
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

    /// A free frame for a stage to fill and hand on through ``Stage/nextReady()`` (the engine then
    /// takes over its reference).
    @inline(__always)
    package func acquireForStage() -> Frame? {
        guard let f = acquire() else { return nil }
        f.holder = Frame.stageOwned
        return f
    }

    /// A free frame, owned by the lease until it ends; nil when every frame is in use.
    @inline(__always)
    public func lease() -> FrameLease? {
        acquire().map(FrameLease.init(owning:))
    }

    /// Waits up to `timeoutNanoseconds` for a free frame.
    public func lease(timeoutNanoseconds: UInt64) -> FrameLease? {
        acquire(timeoutNanoseconds: timeoutNanoseconds).map(FrameLease.init(owning:))
    }

    package func recycle(_ frame: Frame) {
        lock.lock()
        free.append(frame)
        if waiters > 0 { lock.signal() }
        lock.unlock()
    }
}
