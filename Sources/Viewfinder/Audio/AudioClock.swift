import Foundation

/// Measures a sound card's sample clock against `CLOCK_MONOTONIC`.
///
/// Every period comes with the device's position (frames since start) and the monotonic time of
/// its first frame. The estimator keeps one point per tenth of a second over a sliding window (30 s)
/// and fits a straight line by least squares: its slope is the card's real rate (reported in ppm
/// off nominal), and the line maps any position to a time and back. Fitting a window rather than
/// taking the latest stamp averages out the scheduling jitter of individual stamps; the window
/// follows a clock whose rate wanders with temperature.
///
/// Until the points span a second, or when the fit is implausible (more than 2 % off: not a real
/// sound card clock), the nominal rate is used with the line through the points' centre.
///
/// When frames were lost (an overrun), the first period after the gap has a position that is too
/// small for its time; ``add(position:timestampNanoseconds:discontinuity:)`` moves the positions on
/// by the number of frames the clock says were lost, so positions stay proportional to time. That
/// estimate rests on one stamp, and the first stamps after a restart can be stale (seen with
/// snd-aloop under emulation), so an overrun never joins what follows to what came before:
///
/// - The gap starts a new *segment*, re-anchored on the device's own stamps after the restart:
///   positions map to times through the current segment's centre only (until the new segment has a
///   point, through the old line and the gap estimate). A wrong gap estimate costs a shift of the
///   positions (silence of the wrong length), never a wrong time for a position.
/// - The first 50 ms after a restart give no points at all (their stamps may predate the restart).
/// - The slope (the rate) is fitted over the segments that span at least a second, each around its
///   own centre; segments shorter than that (an overrun storm) never move the rate.
/// - Points more than 2 ms (or 4 σ) off the line are left out of the fit, so bad stamps can neither
///   tilt it nor move it. A point is judged against the rate found so far, around its segment's
///   *median* offset, and σ is the residuals' median absolute deviation (× 1.4826): a run of bad
///   stamps cannot move the line it is judged against. After a restart (or at the start) a
///   device's stamps can be late for a few hundred milliseconds — a virtual machine's timer
///   catching up after the machine stalled it; judged around a mean and against a slope fitted to
///   them, such a cluster stayed in the line for as long as it stayed in the window (7.5 ms off
///   for stamps up to 120 ms late after a restart, 27 ms at the start); judged around the median it
///   is left out once the segment holds more good points than late ones.
///
/// Storage is preallocated; nothing is allocated per period.
public struct AudioClockEstimator: Sendable {
    public let nominalRate: Double
    public let window: Double
    private var positions: [Double]
    private var times: [Double]
    private var segments: [Int]
    private var residuals: [Double]
    /// Scratch for the medians (preallocated: `fit` runs on the delivery thread per point).
    private var scratch: [Double]
    private var segment = 0
    private var head = 0
    private var count = 0
    private var lastPointPosition: Double = -.infinity
    private var settleUntil: Double = -.infinity
    private var origin: UInt64?
    private var offset: Int64 = 0
    private var meanP = 0.0, meanT = 0.0
    private(set) public var rate: Double
    /// Frames added to the positions for losses (overruns).
    private(set) public var framesLost: UInt64 = 0
    /// Discontinuities (overruns) seen.
    private(set) public var restarts = 0

    public init(nominalRate rate: Int, window seconds: Double = 30) {
        nominalRate = Double(rate)
        window = seconds
        let n = max(16, Int(seconds * 10) + 1)
        positions = [Double](repeating: 0, count: n)
        times = [Double](repeating: 0, count: n)
        segments = [Int](repeating: 0, count: n)
        residuals = [Double](repeating: 0, count: n)
        scratch = [Double](repeating: 0, count: n)
        self.rate = Double(rate)
    }

    /// Parts per million the card's clock runs fast (+) or slow (−) against the monotonic clock.
    public var ppm: Double { (rate / nominalRate - 1) * 1e6 }
    public var hasPoints: Bool { count > 0 }

    /// Adds a period; returns its position corrected for frames lost before it.
    public mutating func add(position reported: UInt64, timestampNanoseconds t: UInt64, discontinuity: Bool) -> UInt64 {
        if origin == nil { origin = t }
        var p = Int64(reported) &+ offset
        if discontinuity && count > 0 {
            let expected = position(atNanoseconds: t)
            let gap = Int64((expected - Double(p)).rounded())
            if gap > 0 { offset &+= gap; p &+= gap; framesLost &+= UInt64(gap) }
            segment += 1
            restarts += 1
            settleUntil = Double(p) + nominalRate / 20
        }
        let pd = Double(p)
        guard pd >= settleUntil else { return UInt64(max(0, p)) }
        let cap = positions.count
        if count == 0 || pd - lastPointPosition >= nominalRate / 10 || segment != segments[(head + count + cap - 1) % cap] {
            lastPointPosition = pd
            positions[(head + count) % cap] = pd
            times[(head + count) % cap] = seconds(t)
            segments[(head + count) % cap] = segment
            if count < cap { count += 1 } else { head = (head + 1) % cap }
            fit()
        }
        return UInt64(max(0, p))
    }

    private func seconds(_ ns: UInt64) -> Double {
        guard let o = origin else { return 0 }
        return ns >= o ? Double(ns - o) / 1e9 : -Double(o - ns) / 1e9
    }

    /// The end (exclusive) of the segment starting at index `i` (indices relative to `head`).
    private func segmentEnd(_ i: Int) -> Int {
        let cap = positions.count
        let seg = segments[(head + i) % cap]
        var j = i
        while j < count && segments[(head + j) % cap] == seg { j += 1 }
        return j
    }

    /// One least-squares pass: a slope shared by the long segments, each around its own centre.
    /// Points whose residual (from `fit`) is larger than `limit` are left out. Also sets
    /// the current segment's centre. Nil when no long segment gives a slope.
    private mutating func pass(limit: Double) -> Double? {
        let cap = positions.count
        var sxy = 0.0, sxx = 0.0, longSpan = 0.0
        var i = 0
        while i < count {
            let j = segmentEnd(i)
            var sp = 0.0, st = 0.0, n = 0
            for k in i..<j where abs(residuals[(head + k) % cap]) <= limit {
                sp += positions[(head + k) % cap]; st += times[(head + k) % cap]; n += 1
            }
            if n == 0 {   // every point rejected: fall back to all of them for the centre
                for k in i..<j { sp += positions[(head + k) % cap]; st += times[(head + k) % cap] }
                n = j - i
            }
            let mp = sp / Double(n), mt = st / Double(n)
            let span = positions[(head + j - 1) % cap] - positions[(head + i) % cap]
            if span >= nominalRate {
                longSpan += span
                for k in i..<j where abs(residuals[(head + k) % cap]) <= limit {
                    let dp = positions[(head + k) % cap] - mp
                    sxy += dp * (times[(head + k) % cap] - mt)
                    sxx += dp * dp
                }
            }
            if j == count { meanP = mp; meanT = mt }
            i = j
        }
        guard longSpan > 0, sxy > 0 else { return nil }
        return sxx / sxy
    }

    /// Residuals of every point against the current rate, around its segment's median offset;
    /// then the least-squares pass over the points within 2 ms (or 4 σ, σ from the residuals'
    /// median absolute deviation) gives the new rate and the current segment's centre.
    private mutating func fit() {
        let cap = positions.count
        let reference = rate
        var i = 0
        while i < count {
            let j = segmentEnd(i)
            for k in i..<j { scratch[k - i] = times[(head + k) % cap] - positions[(head + k) % cap] / reference }
            let m = Self.median(&scratch, j - i)
            for k in i..<j { residuals[(head + k) % cap] = times[(head + k) % cap] - positions[(head + k) % cap] / reference - m }
            i = j
        }
        for k in 0..<count { scratch[k] = abs(residuals[(head + k) % cap]) }
        let sigma = 1.4826 * Self.median(&scratch, count)
        if let fitted = pass(limit: max(0.002, 4 * sigma)), abs(fitted / nominalRate - 1) <= 0.02 { rate = fitted } else { rate = nominalRate }
    }

    /// The median of `values[0..<n]` (reordering them), by selection: no allocation, O(n).
    static func median(_ values: inout [Double], _ n: Int) -> Double {
        guard n > 0 else { return 0 }
        return values.withUnsafeMutableBufferPointer { v in
            let k = n / 2
            let upper = select(v, n, k)
            guard n % 2 == 0 else { return upper }
            // After the selection every element below `k` is ≤ the k-th: the lower middle is their largest.
            var lower = v[0]
            for x in 1..<k where v[x] > lower { lower = v[x] }
            return (lower + upper) / 2
        }
    }

    /// Hoare's selection: puts the `k`-th smallest of `v[0..<n]` at `k`, smaller ones before it.
    private static func select(_ v: UnsafeMutableBufferPointer<Double>, _ n: Int, _ k: Int) -> Double {
        var lo = 0, hi = n - 1
        while lo < hi {
            let pivot = v[(lo + hi) / 2]
            var a = lo, b = hi
            while a <= b {
                while v[a] < pivot { a += 1 }
                while v[b] > pivot { b -= 1 }
                if a <= b { v.swapAt(a, b); a += 1; b -= 1 }
            }
            if k <= b { hi = b } else if k >= a { lo = a } else { break }
        }
        return v[k]
    }

    /// The monotonic time (ns) of the frame at `position`, by the fitted line.
    public func nanoseconds(atPosition p: Double) -> Double {
        Double(origin ?? 0) + (meanT + (p - meanP) / rate) * 1e9
    }

    /// The (fractional) position of the frame captured at monotonic time `t` ns.
    public func position(atNanoseconds t: UInt64) -> Double {
        meanP + (seconds(t) - meanT) * rate
    }
}

/// Sample conversions and levels.
public enum AudioSamples {
    /// Converts interleaved samples of any captured format to signed 16-bit, appending to `out`.
    public static func appendS16(_ data: UnsafeRawBufferPointer, format: AudioSampleFormat, to out: inout [Int16]) {
        switch format {
        case .s16:
            let n = data.count / 2
            for i in 0..<n { out.append(Int16(littleEndian: data.loadUnaligned(fromByteOffset: i * 2, as: Int16.self))) }
        case .s32:
            let n = data.count / 4
            for i in 0..<n { out.append(Int16(truncatingIfNeeded: Int32(littleEndian: data.loadUnaligned(fromByteOffset: i * 4, as: Int32.self)) >> 16)) }
        case .float32:
            let n = data.count / 4
            for i in 0..<n {
                let v = data.loadUnaligned(fromByteOffset: i * 4, as: Float.self)
                // ±1.0 is full scale with 1/32768 a step (ALSA's plug and FFmpeg's convention):
                // every 16-bit value comes back exactly; +1.0 clips to 32767.
                let c = v.isNaN ? 0 : min(1, max(-1, v))
                out.append(Int16(max(-32768, min(32767, (c * 32768).rounded()))))
            }
        }
    }

    /// The largest absolute sample as a fraction of full scale (0…1).
    public static func peak(_ data: UnsafeRawBufferPointer, format: AudioSampleFormat) -> Double {
        var m = 0.0
        switch format {
        case .s16:
            var best: Int32 = 0
            for i in 0..<(data.count / 2) { best = max(best, abs(Int32(Int16(littleEndian: data.loadUnaligned(fromByteOffset: i * 2, as: Int16.self))))) }
            m = Double(best) / 32768
        case .s32:
            var best: Int64 = 0
            for i in 0..<(data.count / 4) { best = max(best, abs(Int64(Int32(littleEndian: data.loadUnaligned(fromByteOffset: i * 4, as: Int32.self))))) }
            m = Double(best) / 2_147_483_648
        case .float32:
            var best: Float = 0
            for i in 0..<(data.count / 4) { let v = data.loadUnaligned(fromByteOffset: i * 4, as: Float.self); if !v.isNaN { best = max(best, abs(v)) } }
            m = Double(min(best, 1))
        }
        return m
    }

    /// A level as dBFS (−∞ for silence is reported as −120).
    public static func dBFS(_ peak: Double) -> Double { peak > 1e-6 ? 20 * log10(peak) : -120 }
}
