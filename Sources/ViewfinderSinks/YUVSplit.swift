import Viewfinder

/// Plane splitting of packed YUV, the step that precedes every TurboJPEG encode of packed frames.
public enum YUVSplit {
    /// Byte order of packed 4:2:2 pixels.
    public enum Packed422Order: Sendable {
        /// Y0 U Y1 V.
        case yuyv
        /// U Y0 V Y1.
        case uyvy

        var yOffset: Int { self == .yuyv ? 0 : 1 }
        var uOffset: Int { self == .yuyv ? 1 : 0 }
    }

    /// Splits packed 4:2:2 rows into a `width`×`height` Y plane and, when `u` and `v` are given,
    /// `width/2`×`height` U and V planes (rows packed without padding). `width` must be even.
    @inline(__always)
    public static func packed422(_ src: UnsafePointer<UInt8>, bytesPerRow: Int, width: Int, height: Int, order: Packed422Order,
                                 y: UnsafeMutablePointer<UInt8>, u: UnsafeMutablePointer<UInt8>?, v: UnsafeMutablePointer<UInt8>?) {
        let yOffset = order.yOffset, uOffset = order.uOffset
        let pairs = width / 2
        let vOffset = uOffset &+ 2
        for row in 0..<height {
            let s = src + row &* bytesPerRow
            let yd = y + row &* width
            if let u, let v {
                let ud = u + row &* pairs, vd = v + row &* pairs
                var x = 0
                while x < pairs {
                    let b = x &* 4
                    yd[x &* 2] = s[b &+ yOffset]
                    yd[x &* 2 &+ 1] = s[b &+ 2 &+ yOffset]
                    ud[x] = s[b &+ uOffset]
                    vd[x] = s[b &+ vOffset]
                    x &+= 1
                }
            } else {
                var x = 0
                while x < width { yd[x] = s[x &* 2 &+ yOffset]; x &+= 1 }
            }
        }
    }
}
