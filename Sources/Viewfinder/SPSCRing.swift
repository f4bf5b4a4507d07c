import Synchronization

/// A bounded, lock-free, single-producer/single-consumer ring.
///
/// - Capacity is a power of two; indices grow without bound and are masked.
/// - The producer owns `tail`, the consumer owns `head`. Each publishes its index with a release
///   store that pairs with the other side's acquire load, so an element's write happens before its
///   read, and its read (move-out) happens before the slot is written again.
/// - Each side keeps a cached copy of the other side's index and reloads it only when the cache
///   says the ring is full (producer) or empty (consumer): most operations touch no shared line.
/// - Head and tail live on separate cache lines (padding), which matters a lot on this hardware.
///
/// When full, ``push(_:)`` hands the element back: the caller's policy decides what to do with it.
///
/// Exactly one thread may call the producer methods and exactly one the consumer methods.
/// `@unchecked Sendable` because the ring's protocol, not the type system, makes that safe.
public final class SPSCRing<Element>: @unchecked Sendable {
    public typealias CacheLinePad = (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)

    @usableFromInline let storage: UnsafeMutablePointer<Element>
    @usableFromInline let mask: Int
    public let capacity: Int

    @usableFromInline var _pad0: CacheLinePad = (0, 0, 0, 0, 0, 0, 0, 0)
    /// Next index to read. Written by the consumer only.
    @usableFromInline let head = Atomic<Int>(0)
    /// Consumer's cache of `tail`.
    @usableFromInline var cachedTail: Int = 0
    @usableFromInline var _pad1: CacheLinePad = (0, 0, 0, 0, 0, 0, 0, 0)
    /// Next index to write. Written by the producer only.
    @usableFromInline let tail = Atomic<Int>(0)
    /// Producer's cache of `head`.
    @usableFromInline var cachedHead: Int = 0
    @usableFromInline var _pad2: CacheLinePad = (0, 0, 0, 0, 0, 0, 0, 0)

    /// A ring holding up to `capacity` elements; `capacity` must be a power of two ≥ 2.
    public init(capacity: Int) {
        precondition(capacity >= 2 && capacity & (capacity - 1) == 0, "SPSCRing capacity must be a power of two ≥ 2")
        self.capacity = capacity
        self.mask = capacity - 1
        self.storage = .allocate(capacity: capacity)
    }

    deinit {
        // Destroy whatever is still queued. At deinit no other thread can hold the ring.
        var h = head.load(ordering: .relaxed)
        let t = tail.load(ordering: .relaxed)
        while h != t { (storage + (h & mask)).deinitialize(count: 1); h &+= 1 }
        storage.deallocate()
    }

    // MARK: Producer

    /// Appends `element`, or hands it back when the ring is full.
    @inlinable @inline(__always)
    public func push(_ element: consuming Element) -> Element? {
        let t = tail.load(ordering: .relaxed)  // own index
        if t &- cachedHead == capacity {
            // Pairs with the consumer's releasing store of `head`: the slot's previous element has
            // been moved out before we overwrite it.
            cachedHead = head.load(ordering: .acquiring)
            if t &- cachedHead == capacity { return element }
        }
        (storage + (t & mask)).initialize(to: element)
        // Pairs with the consumer's acquiring load of `tail`.
        tail.store(t &+ 1, ordering: .releasing)
        return nil
    }

    /// Room left, as seen by the producer (exact on the producer thread, may under-report).
    @inlinable
    public var freeCapacity: Int {
        capacity - (tail.load(ordering: .relaxed) &- head.load(ordering: .acquiring))
    }

    // MARK: Consumer

    /// Removes the oldest element, or returns nil when empty.
    @inlinable @inline(__always)
    public func pop() -> Element? {
        let h = head.load(ordering: .relaxed)  // own index
        if h == cachedTail {
            // Pairs with the producer's releasing store of `tail`.
            cachedTail = tail.load(ordering: .acquiring)
            if h == cachedTail { return nil }
        }
        let e = (storage + (h & mask)).move()
        // Pairs with the producer's acquiring load of `head`.
        head.store(h &+ 1, ordering: .releasing)
        return e
    }

    /// The number of queued elements (a snapshot; exact only when both sides are quiet).
    @inlinable
    public var count: Int {
        tail.load(ordering: .acquiring) &- head.load(ordering: .acquiring)
    }

    @inlinable
    public var isEmpty: Bool { count == 0 }
}
