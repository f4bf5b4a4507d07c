import CViewfinderKernels
import Viewfinder

/// Contrast focus measures on luma.
///
/// Both kernels are C loops (`CViewfinderKernels`: a portable build and an AVX2 one chosen at run
/// time) over rows in chunks of at most 1024 pixels with 32-bit accumulators, which cannot
/// overflow for 8-bit input at that length; the chunk sums are added in 64 bits.
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

    /// Variance of the Laplacian (`4c − l − r − u − d`) over the interior of `region`.
    /// - Returns: the variance and the mean luma of the interior samples.
    public static func laplacianVariance(_ luma: LumaView, region: PixelRect? = nil) -> (variance: Double, mean: Double) {
        let r = (region ?? PixelRect(x: 0, y: 0, width: luma.width, height: luma.height)).clamped(width: luma.width, height: luma.height)
        guard r.width >= 3, r.height >= 3 else { return (0, 0) }
        var sum: Int64 = 0, sumSq: UInt64 = 0, sumPix: UInt64 = 0
        let n = r.width - 2
        vf_laplacian_sums(luma.pointer(x: r.x + 1, y: r.y + 1), luma.bytesPerRow, luma.pixelStride, n, r.height - 2, &sum, &sumSq, &sumPix)
        let count = Double(n * (r.height - 2))
        let mean = Double(sum) / count
        return (max(0, Double(sumSq) / count - mean * mean), Double(sumPix) / count)
    }

    /// Tenengrad: mean of `gx² + gy²` of the 3×3 Sobel operator over the interior of `region`.
    /// - Returns: the measure and the mean luma of the interior samples.
    public static func tenengrad(_ luma: LumaView, region: PixelRect? = nil) -> (value: Double, mean: Double) {
        let r = (region ?? PixelRect(x: 0, y: 0, width: luma.width, height: luma.height)).clamped(width: luma.width, height: luma.height)
        guard r.width >= 3, r.height >= 3 else { return (0, 0) }
        var sumSq: UInt64 = 0, sumPix: UInt64 = 0
        let n = r.width - 2
        vf_sobel_sums(luma.pointer(x: r.x + 1, y: r.y + 1), luma.bytesPerRow, luma.pixelStride, n, r.height - 2, &sumSq, &sumPix)
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
