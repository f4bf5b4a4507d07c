import Foundation

/// Order statistics of a set of samples, in the samples' unit (the field names say which).
public struct Distribution: Codable, Sendable, Equatable {
    /// Number of samples.
    public var count: Int
    public var mean: Double
    /// Standard deviation (population).
    public var stddev: Double
    public var min: Double
    public var p50: Double
    public var p90: Double
    public var p99: Double
    public var max: Double

    /// The distribution of `samples` (all zero when there are none). Quantiles are the
    /// nearest-rank sample: p99 of 100 samples is the 99th smallest.
    public init(_ samples: [Double]) {
        count = samples.count
        guard !samples.isEmpty else {
            mean = 0; stddev = 0; min = 0; p50 = 0; p90 = 0; p99 = 0; max = 0
            return
        }
        let s = samples.sorted()
        let m = s.reduce(0, +) / Double(s.count)
        mean = m
        stddev = (s.reduce(0) { $0 + ($1 - m) * ($1 - m) } / Double(s.count)).squareRoot()
        min = s[0]
        max = s[s.count - 1]
        p50 = Distribution.quantile(sorted: s, 0.5)
        p90 = Distribution.quantile(sorted: s, 0.9)
        p99 = Distribution.quantile(sorted: s, 0.99)
    }

    /// Nearest-rank quantile `q` (0...1) of sorted samples.
    public static func quantile(sorted s: [Double], _ q: Double) -> Double {
        guard !s.isEmpty else { return 0 }
        let rank = Int((q * Double(s.count)).rounded(.up))
        return s[Swift.max(0, Swift.min(s.count - 1, rank - 1))]
    }

    /// The median of `values` (0 when empty).
    public static func median(_ values: [Double]) -> Double { quantile(sorted: values.sorted(), 0.5) }
}

/// Counts of samples in equal-width bins, for a histogram plot.
public struct Histogram: Codable, Sendable, Equatable {
    /// Lower edge of the first bin, in the samples' unit.
    public var start: Double
    /// Width of each bin.
    public var binWidth: Double
    /// Count in each bin; samples beyond the last bin are counted in the last one.
    public var counts: [Int]

    public init(start: Double, binWidth: Double, counts: [Int]) {
        self.start = start; self.binWidth = binWidth; self.counts = counts
    }

    /// About `bins` bins spanning the samples' range (a single bin when all samples are equal).
    public init(_ samples: [Double], bins: Int = 40) {
        guard let lo = samples.min(), let hi = samples.max() else {
            self.init(start: 0, binWidth: 1, counts: [])
            return
        }
        let n = Swift.max(1, bins)
        let width = hi > lo ? (hi - lo) / Double(n) : Swift.max(abs(lo) * 0.01, 1e-9)
        var counts = Array(repeating: 0, count: hi > lo ? n : 1)
        for v in samples {
            let i = Swift.min(counts.count - 1, Swift.max(0, Int((v - lo) / width)))
            counts[i] += 1
        }
        self.init(start: lo, binWidth: width, counts: counts)
    }
}

/// A straight-line fit y = intercept + slope·x by least squares, and the RMS of the residuals.
public struct LineFit: Sendable, Equatable {
    public var slope: Double
    public var intercept: Double
    public var residualRMS: Double

    /// Fits `ys` against `xs` (same length, at least two distinct x); nil otherwise.
    public init?(xs: [Double], ys: [Double]) {
        let n = Double(xs.count)
        guard xs.count == ys.count, xs.count >= 2 else { return nil }
        let mx = xs.reduce(0, +) / n, my = ys.reduce(0, +) / n
        var sxx = 0.0, sxy = 0.0
        for (x, y) in zip(xs, ys) { sxx += (x - mx) * (x - mx); sxy += (x - mx) * (y - my) }
        guard sxx > 0 else { return nil }
        slope = sxy / sxx
        intercept = my - slope * mx
        var r2 = 0.0
        for (x, y) in zip(xs, ys) { let r = y - (intercept + slope * x); r2 += r * r }
        residualRMS = (r2 / n).squareRoot()
    }
}
