import Synchronization

/// Drop counts by reason, updated lock-free from any thread.
public final class DropCounters: Sendable {
    private let late = Atomic<UInt64>(0)
    private let ringFull = Atomic<UInt64>(0)
    private let outOfBuffers = Atomic<UInt64>(0)
    private let stage = Atomic<UInt64>(0)
    private let corrupt = Atomic<UInt64>(0)
    private let driverGap = Atomic<UInt64>(0)
    private let storageBacklog = Atomic<UInt64>(0)
    private let observed = Atomic<Bool>(false)
    private let observers = LockedBox<[DropNotices]>([])

    public init() {}

    /// Posts every drop counted with its sequence (``count(_:_:from:)``) to `notices` as well.
    package func addObserver(_ notices: DropNotices) {
        observers.withLock { $0.append(notices) }
        observed.store(true, ordering: .releasing)
    }

    /// Counts `n` drops of frames `sequence ..< sequence + n` and tells the observers which.
    @inline(__always)
    public func count(_ reason: DropReason, _ n: UInt64 = 1, from sequence: UInt64) {
        count(reason, n)
        guard n > 0, observed.load(ordering: .acquiring) else { return }
        observers.withLock { for o in $0 { o.post(sequence: sequence, count: n, reason: reason) } }
    }

    @inline(__always)
    public func count(_ reason: DropReason, _ n: UInt64 = 1) {
        // Relaxed: counters are statistics; readers want eventually-exact totals, not ordering.
        switch reason {
        case .late: late.add(n, ordering: .relaxed)
        case .ringFull: ringFull.add(n, ordering: .relaxed)
        case .outOfBuffers: outOfBuffers.add(n, ordering: .relaxed)
        case .stage: stage.add(n, ordering: .relaxed)
        case .corrupt: corrupt.add(n, ordering: .relaxed)
        case .driverGap: driverGap.add(n, ordering: .relaxed)
        case .storageBacklog: storageBacklog.add(n, ordering: .relaxed)
        }
    }

    public subscript(_ reason: DropReason) -> UInt64 {
        switch reason {
        case .late: return late.load(ordering: .relaxed)
        case .ringFull: return ringFull.load(ordering: .relaxed)
        case .outOfBuffers: return outOfBuffers.load(ordering: .relaxed)
        case .stage: return stage.load(ordering: .relaxed)
        case .corrupt: return corrupt.load(ordering: .relaxed)
        case .driverGap: return driverGap.load(ordering: .relaxed)
        case .storageBacklog: return storageBacklog.load(ordering: .relaxed)
        }
    }

    public var total: UInt64 { DropReason.allCases.reduce(0) { $0 + self[$1] } }

    /// Non-zero counts by reason name.
    public var byName: [String: UInt64] {
        var d: [String: UInt64] = [:]
        for r in DropReason.allCases where self[r] > 0 { d[r.name] = self[r] }
        return d
    }

}

extension DropCounters: CustomStringConvertible {
    /// The total and the non-zero counts by reason, e.g. `3 dropped (late 2, ring_full 1)`, or `none dropped`.
    public var description: String {
        let parts = DropReason.allCases.filter { self[$0] > 0 }.map { "\($0.name) \(self[$0])" }
        return parts.isEmpty ? "none dropped" : "\(total) dropped (\(parts.joined(separator: ", ")))"
    }
}

/// The drops one consumer is told about, queued by whichever thread dropped the frame and handed
/// to the consumer on its own thread (``FrameConsumer/didDrop(sequence:count:reason:)``).
///
/// A fixed ring of entries allocated once; a run of consecutive drops with one reason is one entry.
/// If the consumer's thread falls so far behind that the ring fills, further notices are counted
/// in ``lost`` (the drops themselves are still counted in the statistics).
package final class DropNotices: Sendable {
    package struct Entry: Sendable, Equatable { package var sequence: UInt64; package var count: UInt64; package var reason: DropReason }
    private struct Ring: ~Copyable {
        var entries: [Entry]
        var head = 0, count = 0, lost: UInt64 = 0
    }
    private let ring: LockedBox<Ring>
    private let pending = Atomic<Int>(0)
    package let capacity: Int

    package init(capacity: Int = 256) {
        self.capacity = capacity
        ring = LockedBox(Ring(entries: Array(repeating: Entry(sequence: 0, count: 0, reason: .late), count: capacity)))
    }

    package func post(sequence: UInt64, count: UInt64, reason: DropReason) {
        ring.withLock { r in
            if r.count > 0 {
                // Merge with the last entry when it continues the same run.
                let last = (r.head + r.count - 1) % capacity
                if r.entries[last].reason == reason, r.entries[last].sequence &+ r.entries[last].count == sequence {
                    r.entries[last].count &+= count
                    return
                }
            }
            guard r.count < capacity else { r.lost &+= count; return }
            r.entries[(r.head + r.count) % capacity] = Entry(sequence: sequence, count: count, reason: reason)
            r.count += 1
            pending.store(r.count, ordering: .releasing)
        }
    }

    /// Notices whose entries did not fit.
    package var lost: UInt64 { ring.withLock { $0.lost } }

    /// Hands the queued notices to `body`, oldest first (without holding the lock during `body`).
    @inline(__always)
    package func drain(_ body: (Entry) -> Void) {
        guard pending.load(ordering: .acquiring) > 0 else { return }
        while let e = ring.withLock({ r -> Entry? in
            guard r.count > 0 else { pending.store(0, ordering: .releasing); return nil }
            let e = r.entries[r.head]
            r.head = (r.head + 1) % capacity
            r.count -= 1
            pending.store(r.count, ordering: .releasing)
            return e
        }) { body(e) }
    }
}

/// A lock-free log-scale histogram of latencies, for p50/p99 without allocation.
/// `@unchecked Sendable`: the buckets are atomics, allocated once in init and freed in deinit.
public final class LatencyHistogram: @unchecked Sendable {
    /// Buckets of 2^(1/8) growth from 1 µs: 8 per octave over 24 octaves (1 µs … 16 s).
    static let perOctave = 8
    static let octaves = 24
    static let bucketCount = perOctave * octaves + 1
    private let buckets: UnsafeMutablePointer<Atomic<UInt64>>
    private let total = Atomic<UInt64>(0)
    private let largest = Atomic<UInt64>(0)

    public init() {
        buckets = .allocate(capacity: Self.bucketCount)
        for i in 0..<Self.bucketCount { (buckets + i).initialize(to: Atomic(0)) }
    }

    deinit {
        buckets.deinitialize(count: Self.bucketCount)
        buckets.deallocate()
    }

    @inline(__always)
    static func bucket(_ ns: UInt64) -> Int {
        let us = Double(max(ns, 1000)) / 1000
        let b = Int((log2(us) * Double(perOctave)).rounded(.down))
        return min(max(b, 0), bucketCount - 1)
    }

    @inline(__always)
    public func record(nanoseconds: UInt64) {
        buckets[Self.bucket(nanoseconds)].add(1, ordering: .relaxed)
        total.add(1, ordering: .relaxed)
        largest.max(nanoseconds, ordering: .relaxed)
    }

    public var count: UInt64 { total.load(ordering: .relaxed) }

    /// The largest sample recorded, in nanoseconds (exact, not a bucket bound; 0 when empty).
    public var maximum: UInt64 { largest.load(ordering: .relaxed) }

    /// The non-empty buckets in increasing order: each bucket's range in nanoseconds (samples
    /// below 1 µs fall in the first bucket) and its count. For plotting the distribution.
    public var occupiedBuckets: [(lowerNanoseconds: UInt64, upperNanoseconds: UInt64, count: UInt64)] {
        var out: [(lowerNanoseconds: UInt64, upperNanoseconds: UInt64, count: UInt64)] = []
        for i in 0..<Self.bucketCount {
            let c = buckets[i].load(ordering: .relaxed)
            guard c > 0 else { continue }
            let lower = i == 0 ? 0 : UInt64(pow(2, Double(i) / Double(Self.perOctave)) * 1000)
            out.append((lower, UInt64(pow(2, Double(i + 1) / Double(Self.perOctave)) * 1000), c))
        }
        return out
    }

    /// The latency below which `q` (0…1) of the samples fall, in nanoseconds (bucket upper bound,
    /// but never above the largest sample seen: a quantile above the maximum reads as nonsense).
    public func quantile(_ q: Double) -> UInt64 {
        let n = count
        guard n > 0 else { return 0 }
        let target = UInt64((Double(n) * q).rounded(.up))
        var acc: UInt64 = 0
        let largest = maximum
        for i in 0..<Self.bucketCount {
            acc += buckets[i].load(ordering: .relaxed)
            if acc >= max(target, 1) {
                let upper = UInt64(pow(2, Double(i + 1) / Double(Self.perOctave)) * 1000)
                return largest > 0 ? min(upper, largest) : upper
            }
        }
        let top = UInt64(pow(2, Double(Self.octaves)) * 1000)
        return largest > 0 ? min(top, largest) : top
    }
}

#if canImport(Glibc)
import Glibc
#endif
