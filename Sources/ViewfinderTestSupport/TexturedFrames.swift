import Foundation
import Viewfinder

/// Textured frames for the kernel tests and the kernel timings in Benchmarks/StageTiming.
public enum TexturedFrames {
    /// A frame with a deterministic texture (sums of integer sines and a hash) so kernels do work.
    public static func make(_ format: FrameFormat, seed: UInt64 = 1, shiftX: Int = 0, shiftY: Int = 0) -> Frame {
        let f = Frame(capacity: format.maxByteCount, format: format)
        let p = f.data.assumingMemoryBound(to: UInt8.self)
        p.initialize(repeating: 128, count: format.maxByteCount)
        guard let l = format.lumaLayout else { return f }
        for y in 0..<format.height {
            for x in 0..<format.width {
                let sx = x + shiftX, sy = y + shiftY
                var h = UInt64(truncatingIfNeeded: (sx / 3) &* 73_856_093 ^ (sy / 3) &* 19_349_663) &+ seed
                h = (h ^ (h >> 13)) &* 0x5BD1_E995
                let v = 128 + 50 * sin(Double(sx) * 0.031) * cos(Double(sy) * 0.027) + Double(h % 61) - 30
                p[l.offset + y * l.bytesPerRow + x * l.pixelStride] = UInt8(max(0, min(255, v)))
            }
        }
        return f
    }

    /// CPU time of the calling thread, ns.
    public static func threadCPUNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}
