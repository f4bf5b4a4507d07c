import Viewfinder

/// Luma histograms for metering.
///
/// The kernel counts into four interleaved sub-histograms so consecutive equal samples do not
/// serialise on one counter, and reads the samples through raw pointers without bounds checks.
/// Measured at 1920x1080 in release: see the stage report (`LumaStatisticsBenchmark`).
public enum LumaStatistics {
    /// Counts the luma samples of `region` (whole picture when nil) taking every `step`-th sample
    /// horizontally and vertically, adding into `counts` (256 entries, which the caller zeroes).
    ///
    /// - Returns: the number of samples counted.
    @discardableResult
    public static func histogram(_ luma: LumaView, region: PixelRect? = nil, step: Int = 1, into counts: UnsafeMutablePointer<UInt32>) -> Int {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 1024) { sub -> Int in
            histogram(luma, region: region, step: step, into: counts, scratch: sub.baseAddress!)
        }
    }

    /// As ``histogram(_:region:step:into:)``, with the caller's scratch of 1024 counters for the
    /// four sub-histograms (so nothing is allocated per call).
    @discardableResult
    public static func histogram(_ luma: LumaView, region: PixelRect? = nil, step: Int = 1, into counts: UnsafeMutablePointer<UInt32>, scratch h: UnsafeMutablePointer<UInt32>) -> Int {
        let r = (region ?? PixelRect(x: 0, y: 0, width: luma.width, height: luma.height)).clamped(width: luma.width, height: luma.height)
        guard !r.isEmpty else { return 0 }
        let step = max(1, step)
        let cols = (r.width + step - 1) / step
        let rows = (r.height + step - 1) / step
        let sampleStride = luma.pixelStride &* step
        h.update(repeating: 0, count: 1024)
        let h1 = h + 256, h2 = h + 512, h3 = h + 768
        var y = 0
        while y < rows {
            let row = luma.pointer(x: r.x, y: r.y &+ y &* step)
            var i = 0
            var p = row
            let quads = cols & ~3
            while i < quads {
                let a = Int(p[0]), b = Int(p[sampleStride]), c = Int(p[sampleStride &* 2]), d = Int(p[sampleStride &* 3])
                h[a] &+= 1; h1[b] &+= 1; h2[c] &+= 1; h3[d] &+= 1
                p += sampleStride &* 4
                i &+= 4
            }
            while i < cols {
                h[Int(p[0])] &+= 1
                p += sampleStride
                i &+= 1
            }
            y &+= 1
        }
        for v in 0..<256 { counts[v] &+= h[v] &+ h1[v] &+ h2[v] &+ h3[v] }
        return cols * rows
    }

    /// Mean luma of `region`, every `step`-th sample, without a histogram (for quick checks).
    public static func mean(_ luma: LumaView, region: PixelRect? = nil, step: Int = 1) -> Double {
        let r = (region ?? PixelRect(x: 0, y: 0, width: luma.width, height: luma.height)).clamped(width: luma.width, height: luma.height)
        guard !r.isEmpty else { return 0 }
        let step = max(1, step)
        let cols = (r.width + step - 1) / step
        var total: UInt64 = 0
        var n = 0
        var y = r.y
        let s = luma.pixelStride &* step
        while y < r.y + r.height {
            let row = luma.pointer(x: r.x, y: y)
            var acc: UInt32 = 0
            if s == 1 {
                for i in 0..<cols { acc &+= UInt32(row[i]) }
            } else {
                for i in 0..<cols { acc &+= UInt32(row[i &* s]) }
            }
            total &+= UInt64(acc)
            n &+= cols
            y &+= step
        }
        return n == 0 ? 0 : Double(total) / Double(n)
    }
}

/// A 256-bin luma histogram with its summaries. Allocated once (in a stage's `prepare`), reused.
public final class LumaHistogram {
    /// The counts, 256 entries.
    public let counts: UnsafeMutablePointer<UInt32>
    private let scratch: UnsafeMutablePointer<UInt32>

    public init() {
        counts = .allocate(capacity: 256)
        counts.initialize(repeating: 0, count: 256)
        scratch = .allocate(capacity: 1024)
        scratch.initialize(repeating: 0, count: 1024)
    }

    deinit { counts.deallocate(); scratch.deallocate() }

    public func reset() { counts.update(repeating: 0, count: 256) }

    /// Adds the samples of `region` (every `step`-th) to the counts.
    @discardableResult
    public func add(_ luma: LumaView, region: PixelRect? = nil, step: Int = 1) -> Int {
        LumaStatistics.histogram(luma, region: region, step: step, into: counts, scratch: scratch)
    }

    /// Number of samples counted.
    public var total: Int {
        var n = 0
        for i in 0..<256 { n &+= Int(counts[i]) }
        return n
    }

    /// Mean luma, 0–255 (0 when empty).
    public var mean: Double {
        var n = 0, s = 0
        for i in 0..<256 { n &+= Int(counts[i]); s &+= i &* Int(counts[i]) }
        return n == 0 ? 0 : Double(s) / Double(n)
    }

    /// The luma below which a fraction `q` (0...1) of the samples fall.
    public func quantile(_ q: Double) -> Int {
        let n = total
        guard n > 0 else { return 0 }
        let target = max(1, Int((Double(n) * q).rounded(.up)))
        var acc = 0
        for i in 0..<256 {
            acc &+= Int(counts[i])
            if acc >= target { return i }
        }
        return 255
    }

    /// Fraction of the samples at or above `level`.
    public func fraction(atOrAbove level: Int) -> Double {
        let n = total
        guard n > 0 else { return 0 }
        var c = 0
        for i in max(0, level)..<256 { c &+= Int(counts[i]) }
        return Double(c) / Double(n)
    }

    /// Fraction of the samples at or below `level`.
    public func fraction(atOrBelow level: Int) -> Double {
        let n = total
        guard n > 0 else { return 0 }
        var c = 0
        for i in 0...min(255, max(0, level)) { c &+= Int(counts[i]) }
        return Double(c) / Double(n)
    }
}
