import Synchronization

/// What a producer does when the ring toward a consumer is full.
public enum OverflowPolicy: String, Sendable, Codable, CaseIterable, OptionChoice {
    /// Drop the frame being sent (counted as ``DropReason/ringFull``).
    case dropNewest = "drop_newest"
    /// Drop the oldest queued frame to make room for the new one (counted as ``DropReason/ringFull``).
    case dropOldest = "drop_oldest"
    /// Block the producer until there is room: back-pressure, for non-live sources.
    case wait
}

/// The result of a receive.
public enum ChannelReceive {
    case frame(Frame)
    case timeout
    /// The producer closed the channel and it is drained.
    case closed
}

/// A bounded frame carrier between two threads: an ``SPSCRing`` plus the overflow policy, drop
/// counting, and sleeping/waking so that an idle consumer does not spin.
///
/// One thread sends, one thread receives. The fast path is the ring's lock-free push/pop; the
/// condition lock is touched only when a side has announced that it sleeps.
///
/// `.dropOldest` needs the oldest frame removed, but only the consumer may pop. The producer
/// therefore keeps the new frame in a one-frame holding slot of its own and asks the consumer
/// (through `evictions`) to discard the oldest queued frame; the held frame goes in at the
/// producer's next send or ``flush()``. Order is kept: the held frame is newer than everything
/// queued and is pushed before anything newer.
public final class FrameChannel: @unchecked Sendable {
    // @unchecked Sendable: `held` is touched only by the producer thread; everything shared is in
    // the ring, atomics, or under `lock`.
    public let ring: SPSCRing<Frame>
    /// What a send does when the ring is full. Read and changed (``waitFromNowOn()``) by the
    /// producer only.
    public private(set) var policy: OverflowPolicy
    public let drops: DropCounters
    public let name: String

    private let lock = ConditionLock()
    private let consumerSleeping = Atomic<Bool>(false)
    private let producerSleeping = Atomic<Bool>(false)
    private let closedFlag = Atomic<Bool>(false)
    private let evictions = Atomic<Int>(0)
    private var held: Frame?
    /// The held frame at close time when the ring had no room; guarded by `lock`.
    private var closingFrame: Frame?
    private let sentCount = Atomic<UInt64>(0)

    public init(name: String, capacity: Int, policy: OverflowPolicy, drops: DropCounters) {
        self.name = name
        self.ring = SPSCRing(capacity: capacity)
        self.policy = policy
        self.drops = drops
    }

    deinit {
        held?.release()
        closingFrame?.release()
        while let f = ring.pop() { f.release() }
    }

    public var isClosed: Bool { closedFlag.load(ordering: .acquiring) }

    /// Frames accepted into the channel.
    public var sent: UInt64 { sentCount.load(ordering: .relaxed) }

    // MARK: Producer

    /// Sends `frame` (whose reference passes to the channel). Returns false if it was dropped.
    @discardableResult
    public func send(_ frame: Frame) -> Bool {
        if let h = held {
            // A frame is waiting for room that the consumer is making.
            if ring.push(h) != nil {
                // Still no room: the held frame is superseded by the newer one.
                let seq = h.sequence
                h.release()
                drops.count(.ringFull, from: seq)
                held = frame
                evictions.add(1, ordering: .relaxed)
                wakeConsumer()
                return true
            }
            held = nil
            sentCount.add(1, ordering: .relaxed)
        }
        guard let back = ring.push(frame) else {
            sentCount.add(1, ordering: .relaxed)
            wakeConsumer()
            return true
        }
        switch policy {
        case .dropNewest:
            let seq = back.sequence
            back.release()
            drops.count(.ringFull, from: seq)
            return false
        case .dropOldest:
            held = back
            evictions.add(1, ordering: .relaxed)
            wakeConsumer()
            return true
        case .wait:
            var pending = back
            while true {
                lock.lock()
                producerSleeping.store(true, ordering: .sequentiallyConsistent)
                // Re-check after announcing; pairs with the consumer's fence after its pop.
                if let again = ring.push(pending) {
                    pending = again
                    if isClosed { producerSleeping.store(false, ordering: .relaxed); lock.unlock(); let seq = pending.sequence; pending.release(); drops.count(.ringFull, from: seq); return false }
                    lock.wait(untilMonotonicNanoseconds: monotonicNanoseconds() &+ 20_000_000)
                    producerSleeping.store(false, ordering: .relaxed)
                    lock.unlock()
                } else {
                    producerSleeping.store(false, ordering: .relaxed)
                    lock.unlock()
                    sentCount.add(1, ordering: .relaxed)
                    wakeConsumer()
                    return true
                }
            }
        }
    }

    /// From now on a full ring makes the producer wait instead of dropping (producer side): for
    /// the frames a live source's stages still hold when it has ended — nothing is arriving that
    /// they could hold up. A frame held for `.dropOldest` goes in first.
    public func waitFromNowOn() {
        guard policy != .wait else { return }
        policy = .wait
        // Evictions the consumer has not carried out yet made room for the held frame: waiting
        // makes it instead (whichever side takes the count first acts on it, once).
        _ = evictions.exchange(0, ordering: .relaxed)
        if let h = held {
            held = nil
            send(h)
        }
    }

    /// Pushes a held frame if there is room now (producer side).
    public func flush() {
        if let h = held, ring.push(h) == nil {
            held = nil
            sentCount.add(1, ordering: .relaxed)
            wakeConsumer()
        }
    }

    /// No more frames will be sent. The consumer drains what is queued (and a frame still held
    /// for `.dropOldest`), then sees `.closed`.
    public func close() {
        if let h = held {
            held = nil
            if ring.push(h) == nil {
                sentCount.add(1, ordering: .relaxed)
            } else {
                // No room yet: hand it over through the lock; the consumer takes it after the ring.
                lock.withLock { closingFrame = h }
            }
        }
        closedFlag.store(true, ordering: .releasing)
        lock.withLock { lock.broadcast() }
    }

    @inline(__always)
    private func wakeConsumer() {
        // Pairs with the consumer's store of `consumerSleeping` followed by its re-check of the
        // ring: either it sees our push, or we see that it sleeps (Dekker with full fences).
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        if consumerSleeping.load(ordering: .relaxed) {
            lock.withLock { lock.broadcast() }
        }
    }

    // MARK: Consumer

    /// Takes the next frame, waiting up to `timeoutNanoseconds`.
    public func receive(timeoutNanoseconds: UInt64) -> ChannelReceive {
        if let f = popEvicting() { return .frame(f) }
        // Brief spin: frames often arrive within microseconds of each other under load.
        for _ in 0..<64 {
            if let f = popEvicting() { return .frame(f) }
        }
        let deadline = monotonicNanoseconds() &+ timeoutNanoseconds
        lock.lock()
        defer { lock.unlock() }
        while true {
            consumerSleeping.store(true, ordering: .sequentiallyConsistent)
            if let f = popEvicting(lockHeld: true) { consumerSleeping.store(false, ordering: .relaxed); return .frame(f) }
            if isClosed {
                consumerSleeping.store(false, ordering: .relaxed)
                if let f = popEvicting(lockHeld: true) { return .frame(f) }
                if let f = closingFrame { closingFrame = nil; sentCount.add(1, ordering: .relaxed); return .frame(f) }
                return .closed
            }
            let now = monotonicNanoseconds()
            if now >= deadline { consumerSleeping.store(false, ordering: .relaxed); return .timeout }
            // A bounded wait also covers any wake-up missed through a bug elsewhere.
            lock.wait(untilMonotonicNanoseconds: min(deadline, now &+ 50_000_000))
        }
    }

    /// Pops, first discarding the oldest frames the producer asked to evict.
    @inline(__always)
    private func popEvicting(lockHeld: Bool = false) -> Frame? {
        if evictions.load(ordering: .relaxed) > 0 {
            var n = evictions.exchange(0, ordering: .relaxed)
            // Keep at least one frame to deliver.
            while n > 0, ring.count > 1, let old = ring.pop() {
                let seq = old.sequence
                old.release()
                drops.count(.ringFull, from: seq)
                n -= 1
            }
        }
        guard let f = ring.pop() else { return nil }
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        // Wake a blocked producer only once the ring is half empty: it then refills in a burst
        // instead of waking once per frame (a futex wake and two context switches each).
        if producerSleeping.load(ordering: .relaxed) && ring.count <= ring.capacity / 2 {
            if lockHeld { lock.broadcast() } else { lock.withLock { lock.broadcast() } }
        }
        return f
    }

    /// Frames queued now.
    public var count: Int { ring.count }
}
