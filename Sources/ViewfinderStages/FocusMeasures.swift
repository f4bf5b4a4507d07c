import CViewfinderKernels
import Foundation
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
    /// - Parameters:
    ///   - luma: the picture's luma.
    ///   - region: the part measured (nil: the whole picture).
    ///   - window: how the samples of the region are weighted (``FocusWindow``).
    public static func measure(_ luma: LumaView, region: PixelRect? = nil, window: FocusWindow = .box) -> Statistics {
        switch window {
        case .box:
            let l = laplacianVariance(luma, region: region)
            let t = tenengrad(luma, region: region)
            return Statistics(laplacianVariance: l.variance, tenengrad: t.value, meanLuma: l.mean)
        case .hann:
            return tapered(luma, region: region)
        }
    }

    /// Smallest half-resolution copy ``halfResolution`` makes.
    static let halfMinimum = (width: 48, height: 32)

    /// The region at half resolution: each output sample is the [1 2 1]⊗[1 2 1]/16 average around
    /// an even-offset source sample (the binomial pre-filter leaves 2 % of the energy at 3/4 of
    /// the Nyquist frequency to alias, a 2×2 box 15 %), written into `into` (capacity at least
    /// ⌈w/2⌉·⌈h/2⌉ for the region's interior). Returns the half-resolution view, nil when the
    /// region is too small (the C kernel `vf_half_binomial` does the copy). A measure on it works
    /// in the band around a quarter of the full picture's Nyquist frequency: a half-pixel shift of
    /// the picture resampled by Catmull-Rom (a shaking camera in the sim) changes its Tenengrad by
    /// 2 % where the full-resolution one changes by 13 %, while a 3×3 blur (the lens) still drops it by 35 % (`FocusScaleTests`).
    /// A region whose copy would be smaller than ``halfMinimum`` (48×32) is not copied (nil): its
    /// few samples would make the score noisier than the shift does.
    static func halfResolution(_ luma: LumaView, region: PixelRect?, into buffer: UnsafeMutablePointer<UInt8>, capacity: Int) -> LumaView? {
        let r = (region ?? PixelRect(x: 0, y: 0, width: luma.width, height: luma.height)).clamped(width: luma.width, height: luma.height)
        let w = (r.width - 2) / 2, h = (r.height - 2) / 2
        guard w >= halfMinimum.width, h >= halfMinimum.height else { return nil }
        guard w * h <= capacity else { return nil }
        vf_half_binomial(luma.pointer(x: r.x + 1, y: r.y + 1), luma.bytesPerRow, luma.pixelStride, w, h, buffer, w)
        return LumaView(base: UnsafePointer(buffer), width: w, height: h, bytesPerRow: w, pixelStride: 1)
    }

    /// Tiles per side of the tapered window: the weight of a tile is the Hann window's at its
    /// centre, sin²(π(i + ½)/8), so the border tiles count 4 % of the centre's. Measured on the
    /// sim's shaken frames of a real photograph (Storm), eight tiles hold the in-focus spread as
    /// low as a per-pixel taper (1.2 % against 1.3 % std; a hard-edged window 4.5 %).
    static let taperTiles = 8

    /// Both measures and the mean luma weighted by a separable Hann taper over the region's
    /// interior (per tile, ``taperTiles`` per side; fewer where the region has fewer than 3
    /// samples per tile): detail moving across the window's border by the camera's shake then
    /// barely moves the score, while the focus signal (the same detail sharpening) is kept.
    static func tapered(_ luma: LumaView, region: PixelRect?) -> Statistics {
        let r = (region ?? PixelRect(x: 0, y: 0, width: luma.width, height: luma.height)).clamped(width: luma.width, height: luma.height)
        guard r.width >= 3, r.height >= 3 else { return Statistics(laplacianVariance: 0, tenengrad: 0, meanLuma: 0) }
        let w = r.width - 2, h = r.height - 2
        let tx = max(1, min(taperTiles, w / 3)), ty = max(1, min(taperTiles, h / 3))
        var wCount = 0.0, wLapSum = 0.0, wLapSq = 0.0, wSobel = 0.0, wPix = 0.0
        for i in 0..<ty {
            let y0 = h * i / ty, y1 = h * (i + 1) / ty
            let wy = taperWeight(i, ty)
            for j in 0..<tx {
                let x0 = w * j / tx, x1 = w * (j + 1) / tx
                let weight = wy * taperWeight(j, tx)
                let n = x1 - x0, rows = y1 - y0
                let p = luma.pointer(x: r.x + 1 + x0, y: r.y + 1 + y0)
                var lSum: Int64 = 0, lSq: UInt64 = 0, lPix: UInt64 = 0, sSq: UInt64 = 0, sPix: UInt64 = 0
                vf_laplacian_sums(p, luma.bytesPerRow, luma.pixelStride, n, rows, &lSum, &lSq, &lPix)
                vf_sobel_sums(p, luma.bytesPerRow, luma.pixelStride, n, rows, &sSq, &sPix)
                wCount += weight * Double(n * rows)
                wLapSum += weight * Double(lSum)
                wLapSq += weight * Double(lSq)
                wSobel += weight * Double(sSq)
                wPix += weight * Double(lPix)
            }
        }
        guard wCount > 0 else { return Statistics(laplacianVariance: 0, tenengrad: 0, meanLuma: 0) }
        let mean = wLapSum / wCount
        return Statistics(laplacianVariance: max(0, wLapSq / wCount - mean * mean), tenengrad: wSobel / wCount, meanLuma: wPix / wCount)
    }

    /// The Hann weight of tile `i` of `n` (1 when there is a single tile).
    @inline(__always) static func taperWeight(_ i: Int, _ n: Int) -> Double {
        guard n > 1 else { return 1 }
        let s = sin(Double.pi * (Double(i) + 0.5) / Double(n))
        return s * s
    }
}

/// How a focus measure weights the samples of its region.
public enum FocusWindow: String, OptionChoice {
    /// Every sample alike (a hard-edged window): detail at the window's border counts in full, so a
    /// shaking camera moving an edge in and out moves the score.
    case box
    /// A separable Hann taper (sin², full weight in the centre, little at the border): the score
    /// follows the focus, not the shake.
    case hann
}
