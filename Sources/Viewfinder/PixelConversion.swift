/// RGB24, BGR24, BGRA and 8-bit Bayer frames to planar 4:2:0 YUV (I420, full-range BT.601 as JPEG
/// uses), at full size or reduced by 2, 4 or 8: the decoded view stages read on those cameras.
///
/// Luma per output pixel, chroma from the mean of each 2×2 block. Bayer is demosaiced from the
/// 2×2 window at each pixel (it holds one red, one blue and two greens whatever its parity); a
/// reduced conversion reads one aligned 2×2 cell per output pixel. Nothing is allocated per frame.
public final class RGBBayerConverter: PixelDecoder {
    public init() {}

    public static func handles(_ f: PixelFormat) -> Bool { f == .rgb24 || f == .bgr24 || f == .bgra || f.isBayer }

    public let scaleDenominators = [1, 2, 4, 8]

    /// The I420 layout of a `format` frame converted at 1/`scale` (even row pitch).
    public static func outputFormat(for format: FrameFormat, scale: Int) -> FrameFormat {
        let w = (format.width + scale - 1) / scale, h = (format.height + scale - 1) / scale
        return FrameFormat(.i420, width: w, height: h, bytesPerRow: (w + 1) & ~1)
    }

    public func decodedByteCount(for format: FrameFormat, scale: Int) -> Int {
        Self.outputFormat(for: format, scale: scale).maxByteCount
    }

    public func decode(_ source: Frame, scale: Int, into target: Frame) throws {
        let sf = source.format
        guard Self.handles(sf.pixelFormat), scaleDenominators.contains(scale) else { throw PixelConversionError.unsupported(sf.pixelFormat) }
        let out = Self.outputFormat(for: sf, scale: scale)
        let need = sf.bytesPerRow * (sf.height - 1) + FrameFormat.minimumBytesPerRow(sf.pixelFormat, width: sf.width)
        guard source.capacity >= need, out.maxByteCount <= target.capacity else { throw PixelConversionError.tooSmall }
        guard let dst = MutableFramePixels(format: out, data: target.data, capacity: target.capacity) else { throw PixelConversionError.tooSmall }
        let src = UnsafePointer(source.data.assumingMemoryBound(to: UInt8.self))
        switch sf.pixelFormat {
        case .rgb24: convert(PackedRGB(base: src, bytesPerRow: sf.bytesPerRow, r: 0, b: 2, width: sf.width, height: sf.height), scale: scale, into: dst)
        case .bgr24: convert(PackedRGB(base: src, bytesPerRow: sf.bytesPerRow, r: 2, b: 0, width: sf.width, height: sf.height), scale: scale, into: dst)
        case .bgra: convert(PackedRGB(base: src, bytesPerRow: sf.bytesPerRow, r: 2, b: 0, width: sf.width, height: sf.height, step: 4), scale: scale, into: dst)
        default: convert(BayerRGB(base: src, bytesPerRow: sf.bytesPerRow, pattern: sf.pixelFormat, width: sf.width, height: sf.height, reduced: scale > 1), scale: scale, into: dst)
        }
        target.format = out
        target.bytesUsed = out.maxByteCount
    }

    @inline(__always)
    private func convert<S: RGBSampler>(_ s: S, scale: Int, into dst: MutableFramePixels) {
        let w = dst.width, h = dst.height
        let yp = dst.luma.unsafeBaseAddress, ypitch = dst.luma.bytesPerRow
        let up = dst.cb!.unsafeBaseAddress, vp = dst.cr!.unsafeBaseAddress, cpitch = dst.cb!.bytesPerRow
        var y = 0
        while y < h {
            let y1 = min(y + 1, h - 1)
            let o0: Int = y &* ypitch, o1: Int = y1 &* ypitch, oc: Int = (y / 2) &* cpitch
            let row0 = yp + o0, row1 = yp + o1
            let urow = up + oc, vrow = vp + oc
            var x = 0
            while x < w {
                let x1 = min(x + 1, w - 1)
                let a = s.rgb(x &* scale, y &* scale), b = s.rgb(x1 &* scale, y &* scale)
                let c = s.rgb(x &* scale, y1 &* scale), d = s.rgb(x1 &* scale, y1 &* scale)
                row0[x] = luma(a); row0[x1] = luma(b)
                row1[x] = luma(c); row1[x1] = luma(d)
                let r = (a.0 &+ b.0 &+ c.0 &+ d.0 &+ 2) >> 2
                let g = (a.1 &+ b.1 &+ c.1 &+ d.1 &+ 2) >> 2
                let bl = (a.2 &+ b.2 &+ c.2 &+ d.2 &+ 2) >> 2
                urow[x / 2] = UInt8(clamping: ((-43 &* r &- 85 &* g &+ 128 &* bl &+ 128) >> 8) &+ 128)
                vrow[x / 2] = UInt8(clamping: ((128 &* r &- 107 &* g &- 21 &* bl &+ 128) >> 8) &+ 128)
                x &+= 2
            }
            y &+= 2
        }
    }

    @inline(__always)
    private func luma(_ p: (Int, Int, Int)) -> UInt8 {
        UInt8(truncatingIfNeeded: (77 &* p.0 &+ 150 &* p.1 &+ 29 &* p.2 &+ 128) >> 8)
    }
}

/// Why a frame could not be converted.
public enum PixelConversionError: Error, Equatable {
    case unsupported(PixelFormat)
    case tooSmall
}

protocol RGBSampler {
    /// Red, green, blue (0–255) at source pixel (x, y), which is inside the picture.
    func rgb(_ x: Int, _ y: Int) -> (Int, Int, Int)
}

struct PackedRGB: RGBSampler {
    let base: UnsafePointer<UInt8>
    let bytesPerRow: Int
    let r: Int, b: Int
    let width: Int, height: Int
    var step: Int = 3
    @inline(__always)
    func rgb(_ x: Int, _ y: Int) -> (Int, Int, Int) {
        let off: Int = min(y, height - 1) &* bytesPerRow &+ min(x, width - 1) &* step
        let p = base + off
        return (Int(p[r]), Int(p[1]), Int(p[b]))
    }
}

struct BayerRGB: RGBSampler {
    let base: UnsafePointer<UInt8>
    let bytesPerRow: Int
    let width: Int, height: Int
    /// For each parity of the window's top-left corner (x & 1 | (y & 1) << 1): the offsets of red
    /// and blue, and of the two greens, within the 2×2 window.
    let red: (Int, Int, Int, Int), blue: (Int, Int, Int, Int), green1: (Int, Int, Int, Int), green2: (Int, Int, Int, Int)
    let reduced: Bool

    init(base: UnsafePointer<UInt8>, bytesPerRow: Int, pattern: PixelFormat, width: Int, height: Int, reduced: Bool) {
        self.base = base; self.bytesPerRow = bytesPerRow; self.width = width; self.height = height; self.reduced = reduced
        // Colour at (i, j) of the 2×2 cell at the origin: 0 red, 1 green, 2 blue.
        let cell: [Int]
        switch pattern {
        case .sbggr8: cell = [2, 1, 1, 0]
        case .sgbrg8: cell = [1, 2, 0, 1]
        case .sgrbg8: cell = [1, 0, 2, 1]
        default: cell = [0, 1, 1, 2] // srggb8
        }
        var rs = [0, 0, 0, 0], bs = [0, 0, 0, 0], g1 = [0, 0, 0, 0], g2 = [0, 0, 0, 0]
        for parity in 0..<4 {
            let px = parity & 1, py = parity >> 1
            var greens: [Int] = []
            for k in 0..<4 {
                let dx = k & 1, dy = k >> 1
                let colour = cell[((py + dy) & 1) * 2 + ((px + dx) & 1)]
                let off = dy * bytesPerRow + dx
                switch colour {
                case 0: rs[parity] = off
                case 2: bs[parity] = off
                default: greens.append(off)
                }
            }
            g1[parity] = greens[0]; g2[parity] = greens[1]
        }
        red = (rs[0], rs[1], rs[2], rs[3]); blue = (bs[0], bs[1], bs[2], bs[3])
        green1 = (g1[0], g1[1], g1[2], g1[3]); green2 = (g2[0], g2[1], g2[2], g2[3])
    }

    @inline(__always)
    private func pick(_ t: (Int, Int, Int, Int), _ i: Int) -> Int {
        switch i { case 0: return t.0; case 1: return t.1; case 2: return t.2; default: return t.3 }
    }

    @inline(__always)
    func rgb(_ x: Int, _ y: Int) -> (Int, Int, Int) {
        // The 2×2 window at (x, y), kept inside the picture; reduced conversions use aligned cells.
        var sx = min(x, width - 2), sy = min(y, height - 2)
        if reduced { sx &= ~1; sy &= ~1 }
        let parity = (sx & 1) | ((sy & 1) << 1)
        let off: Int = sy &* bytesPerRow &+ sx
        let p = base + off
        let g = (Int(p[pick(green1, parity)]) &+ Int(p[pick(green2, parity)]) &+ 1) >> 1
        return (Int(p[pick(red, parity)]), g, Int(p[pick(blue, parity)]))
    }
}
