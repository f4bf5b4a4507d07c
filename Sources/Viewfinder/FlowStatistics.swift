import Synchronization

/// Drop counts by reason, updated lock-free from any thread.
public final class DropCounters: Sendable {
    private let late = Atomic<UInt64>(0)
    private let ringFull = Atomic<UInt64>(0)
    private let outOfBuffers = Atomic<UInt64>(0)
    private let stage = Atomic<UInt64>(0)
    private let corrupt = Atomic<UInt64>(0)
    private let driverGap = Atomic<UInt64>(0)

    public init() {}


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

    /// The latency below which `q` (0…1) of the samples fall, in nanoseconds (bucket upper bound).
    public func quantile(_ q: Double) -> UInt64 {
        let n = count
        guard n > 0 else { return 0 }
        let target = UInt64((Double(n) * q).rounded(.up))
        var acc: UInt64 = 0
        for i in 0..<Self.bucketCount {
            acc += buckets[i].load(ordering: .relaxed)
            if acc >= max(target, 1) { return UInt64(pow(2, Double(i + 1) / Double(Self.perOctave)) * 1000) }
        }
        return UInt64(pow(2, Double(Self.octaves)) * 1000)
    }
}

#if canImport(Glibc)
import Glibc
#endif
