import Viewfinder

/// Contrast focus measures on luma.
///
/// Both kernels run over rows in chunks of at most 1024 pixels with 32-bit wrapping accumulators
/// (which cannot overflow for 8-bit input at that length) so the inner loops vectorise; the chunk
/// sums are added in 64 bits.
public enum FocusMeasures {
    /// Raw statistics of a region.
    public struct Statistics: Sendable, Equatable {
        /// Variance of the 4-neighbour Laplacian (luma² units).
        public var laplacianVariance: Double
        /// Mean squared Sobel gradient magnitude (luma² units).
        public var tenengrad: Double
        /// Mean luma of the region.
        public var meanLuma: Double
        public init(laplacianVariance: Double, tenengrad: Double, meanLuma: Double) {
            self.laplacianVariance = laplacianVariance; self.tenengrad = tenengrad; self.meanLuma = meanLuma
        }
        /// Both measures divided by the mean luma squared, so that exposure changes do not move them.
        public var normalised: FocusMeasure {
            let m2 = max(meanLuma * meanLuma, 1)
            return FocusMeasure(laplacianVariance: laplacianVariance / m2, tenengrad: tenengrad / m2)
        }
    }

    static let chunk = 1024

    /// Variance of the Laplacian (`4c − l − r − u − d`) over the interior of `region`.
    /// - Returns: the variance and the mean luma of the interior samples.
    public static func laplacianVariance(_ luma: LumaView, region: PixelRect? = nil) -> (variance: Double, mean: Double) {
        let r = (region ?? PixelRect(x: 0, y: 0, width: luma.width, height: luma.height)).clamped(width: luma.width, height: luma.height)
        guard r.width >= 3, r.height >= 3 else { return (0, 0) }
        switch luma.pixelStride {
        case 1: return laplacian(luma, r, stride: 1)
        case 2: return laplacian(luma, r, stride: 2)
        default: return laplacian(luma, r, stride: luma.pixelStride)
        }
    }

    @inline(__always)
    static func laplacian(_ luma: LumaView, _ r: PixelRect, stride s: Int) -> (variance: Double, mean: Double) {
        var sum: Int64 = 0, sumSq: UInt64 = 0, sumPix: UInt64 = 0
        let bpr = luma.bytesPerRow
        let n = r.width - 2
        for y in (r.y + 1)..<(r.y + r.height - 1) {
            let mid = luma.pointer(x: r.x + 1, y: y)
            let up = mid - bpr, down = mid + bpr
            var start = 0
            while start < n {
                let len = min(chunk, n - start)
                var s1: Int32 = 0, s2: UInt32 = 0, sp: UInt32 = 0
                let o = start &* s
                for i in 0..<len {
                    let k = o &+ i &* s
                    // 16-bit lanes (|lap| ≤ 1020); the square widens to 32 bits (pmaddwd).
                    let c = Int16(mid[k])
                    let l = Int16(mid[k &- s]), rr = Int16(mid[k &+ s])
                    let u = Int16(up[k]), d = Int16(down[k])
                    let lap = (c &<< 2) &- l &- rr &- u &- d
                    let wide = Int32(lap)
                    s1 &+= wide
                    s2 &+= UInt32(bitPattern: wide &* wide)
                    sp &+= UInt32(c)
                }
                sum &+= Int64(s1); sumSq &+= UInt64(s2); sumPix &+= UInt64(sp)
                start &+= len
            }
        }
        let count = Double(n * (r.height - 2))
        let mean = Double(sum) / count
        return (max(0, Double(sumSq) / count - mean * mean), Double(sumPix) / count)
    }

    /// Tenengrad: mean of `gx² + gy²` of the 3×3 Sobel operator over the interior of `region`.
    /// - Returns: the measure and the mean luma of the interior samples.
    public static func tenengrad(_ luma: LumaView, region: PixelRect? = nil) -> (value: Double, mean: Double) {
        let r = (region ?? PixelRect(x: 0, y: 0, width: luma.width, height: luma.height)).clamped(width: luma.width, height: luma.height)
        guard r.width >= 3, r.height >= 3 else { return (0, 0) }
        switch luma.pixelStride {
        case 1: return sobel(luma, r, stride: 1)
        case 2: return sobel(luma, r, stride: 2)
        default: return sobel(luma, r, stride: luma.pixelStride)
        }
    }

    @inline(__always)
    static func sobel(_ luma: LumaView, _ r: PixelRect, stride s: Int) -> (value: Double, mean: Double) {
        var sumSq: UInt64 = 0, sumPix: UInt64 = 0
        let bpr = luma.bytesPerRow
        let n = r.width - 2
        for y in (r.y + 1)..<(r.y + r.height - 1) {
            let mid = luma.pointer(x: r.x + 1, y: y)
            let up = mid - bpr, down = mid + bpr
            var start = 0
            while start < n {
                let len = min(chunk, n - start)
                var s2: UInt32 = 0, sp: UInt32 = 0
                let o = start &* s
                for i in 0..<len {
                    let k = o &+ i &* s
                    let kl = k &- s, kr = k &+ s
                    // 16-bit lanes (|g| ≤ 1020); gx² + gy² widens to 32 bits (pmaddwd).
                    let ul = Int16(up[kl]), uc = Int16(up[k]), ur = Int16(up[kr])
                    let ml = Int16(mid[kl]), mc = Int16(mid[k]), mr = Int16(mid[kr])
                    let dl = Int16(down[kl]), dc = Int16(down[k]), dr = Int16(down[kr])
                    let gx = Int32((ur &+ (mr &<< 1) &+ dr) &- (ul &+ (ml &<< 1) &+ dl))
                    let gy = Int32((dl &+ (dc &<< 1) &+ dr) &- (ul &+ (uc &<< 1) &+ ur))
                    s2 &+= UInt32(bitPattern: gx &* gx &+ gy &* gy)
                    sp &+= UInt32(mc)
                }
                sumSq &+= UInt64(s2); sumPix &+= UInt64(sp)
                start &+= len
            }
        }
        let count = Double(n * (r.height - 2))
        return (Double(sumSq) / count, Double(sumPix) / count)
    }

    /// Both measures of a region.
    public static func measure(_ luma: LumaView, region: PixelRect? = nil) -> Statistics {
        let l = laplacianVariance(luma, region: region)
        let t = tenengrad(luma, region: region)
        return Statistics(laplacianVariance: l.variance, tenengrad: t.value, meanLuma: l.mean)
    }
}
