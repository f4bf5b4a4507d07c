import CViewfinderKernels

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
    /// (A C loop: `CViewfinderKernels`, portable with an AVX2 build chosen at run time.)
    public static func packed422(_ src: UnsafePointer<UInt8>, bytesPerRow: Int, width: Int, height: Int, order: Packed422Order,
                                 y: UnsafeMutablePointer<UInt8>, u: UnsafeMutablePointer<UInt8>?, v: UnsafeMutablePointer<UInt8>?) {
        vf_split_packed422(src, bytesPerRow, width, height, Int32(order.yOffset), Int32(order.uOffset), y, u, v)
    }

    /// Interleaves `width`×`height` Y and `width/2`×`height` U and V planes (rows packed without
    /// padding) into packed 4:2:2 rows `bytesPerRow` apart: the inverse of ``packed422(_:bytesPerRow:width:height:order:y:u:v:)``.
    public static func mergePacked422(y: UnsafePointer<UInt8>, u: UnsafePointer<UInt8>, v: UnsafePointer<UInt8>, width: Int, height: Int, order: Packed422Order,
                                      into dst: UnsafeMutablePointer<UInt8>, bytesPerRow: Int) {
        let pairs = width / 2
        for row in 0..<height {
            vf_merge_packed422(y + row * width, u + row * pairs, v + row * pairs, dst + row * bytesPerRow, pairs, Int32(order.yOffset), Int32(order.uOffset))
        }
    }
}
