import Viewfinder

/// A read-only view of a frame's luma samples: where they start and how they are laid out.
///
/// Packed 4:2:2 formats interleave luma with chroma (`pixelStride` 2); planar formats and GREY
/// have `pixelStride` 1. Kernels take a view so they work on any format with luma.
public struct LumaView: @unchecked Sendable {
    // @unchecked Sendable: a view is a pointer and a geometry; whoever makes one guarantees the
    // memory outlives its use and is not written concurrently (a frame is owned by one thread).
    public var base: UnsafePointer<UInt8>
    public var width: Int
    public var height: Int
    public var bytesPerRow: Int
    /// Distance in bytes between two horizontally adjacent luma samples (1 or 2).
    public var pixelStride: Int

    public init(base: UnsafePointer<UInt8>, width: Int, height: Int, bytesPerRow: Int, pixelStride: Int = 1) {
        self.base = base
        self.width = width
        self.height = height
        self.bytesPerRow = bytesPerRow
        self.pixelStride = pixelStride
    }

    /// The luma of `frame`, or nil for formats without a luma plane (RGB, MJPEG).
    public init?(_ frame: Frame) {
        guard let l = frame.format.lumaLayout else { return nil }
        let need = l.offset + (frame.format.height - 1) * l.bytesPerRow + (frame.format.width - 1) * l.pixelStride + 1
        guard frame.capacity >= need else { return nil }
        self.init(base: UnsafePointer(frame.data.assumingMemoryBound(to: UInt8.self)) + l.offset,
                  width: frame.format.width, height: frame.format.height,
                  bytesPerRow: l.bytesPerRow, pixelStride: l.pixelStride)
    }

    /// Pointer to the sample at (x, y).
    @inline(__always)
    public func pointer(x: Int, y: Int) -> UnsafePointer<UInt8> { base + (y &* bytesPerRow &+ x &* pixelStride) }
}

/// A rectangle of pixels, clamped to a picture.
public struct PixelRect: Sendable, Equatable, CustomStringConvertible {
    public var x: Int
    public var y: Int
    public var width: Int
    public var height: Int
    public init(x: Int, y: Int, width: Int, height: Int) {
        self.x = x; self.y = y; self.width = width; self.height = height
    }
    public var description: String { "\(width)x\(height)+\(x)+\(y)" }
    public var isEmpty: Bool { width <= 0 || height <= 0 }

    /// The rectangle of `fraction` of the picture's width and height centred on `center`
    /// (normalised), shifted to lie inside a `width`×`height` picture.
    public static func around(_ center: NormalizedPoint, fraction: Double, width: Int, height: Int, minimum: Int = 8) -> PixelRect {
        let w = min(width, max(minimum, Int((Double(width) * fraction).rounded())))
        let h = min(height, max(minimum, Int((Double(height) * fraction).rounded())))
        var x = Int((center.x * Double(width)).rounded()) - w / 2
        var y = Int((center.y * Double(height)).rounded()) - h / 2
        x = min(max(0, x), width - w)
        y = min(max(0, y), height - h)
        return PixelRect(x: x, y: y, width: w, height: h)
    }

    /// The normalised rectangle `nx, ny, nw, nh` (all 0...1) inside a picture.
    public static func normalised(_ nx: Double, _ ny: Double, _ nw: Double, _ nh: Double, width: Int, height: Int) -> PixelRect {
        let x = min(width - 1, max(0, Int(nx * Double(width))))
        let y = min(height - 1, max(0, Int(ny * Double(height))))
        let w = max(1, min(width - x, Int((nw * Double(width)).rounded())))
        let h = max(1, min(height - y, Int((nh * Double(height)).rounded())))
        return PixelRect(x: x, y: y, width: w, height: h)
    }

    /// This rectangle intersected with a `width`×`height` picture.
    public func clamped(width: Int, height: Int) -> PixelRect {
        let x0 = min(max(0, x), width), y0 = min(max(0, y), height)
        let x1 = min(max(0, x + self.width), width), y1 = min(max(0, y + self.height), height)
        return PixelRect(x: x0, y: y0, width: x1 - x0, height: y1 - y0)
    }
}
