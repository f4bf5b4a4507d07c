/// A pixel format the engine understands, with its V4L2 fourcc.
public enum PixelFormat: String, Sendable, CaseIterable, Codable, CustomStringConvertible {
    /// Packed 4:2:2, Y0 U Y1 V. The corresponding V4L2 code is `V4L2_PIX_FMT_YUYV`.
    case yuyv
    /// Packed 4:2:2, U Y0 V Y1. `V4L2_PIX_FMT_UYVY`.
    case uyvy
    /// Planar 4:2:0: a Y plane, then an interleaved UV plane. `V4L2_PIX_FMT_NV12`.
    case nv12
    /// Planar 4:2:0: Y, U and V planes (YU12). `V4L2_PIX_FMT_YUV420`.
    case i420
    /// Planar 4:2:2: Y, U and V planes. `V4L2_PIX_FMT_YUV422P`.
    case yuv422p
    /// 8-bit luma only. `V4L2_PIX_FMT_GREY`.
    case grey
    /// Packed 8-bit R, G, B. `V4L2_PIX_FMT_RGB24`.
    case rgb24
    /// Motion JPEG: one compressed JPEG image per frame, of variable size. `V4L2_PIX_FMT_MJPEG`.
    case mjpeg
    /// Packed 8-bit B, G, R. `V4L2_PIX_FMT_BGR24`.
    case bgr24
    /// 8-bit Bayer mosaic, rows B G B G… / G R G R…. `V4L2_PIX_FMT_SBGGR8`.
    case sbggr8
    /// 8-bit Bayer mosaic, rows G B G B… / R G R G…. `V4L2_PIX_FMT_SGBRG8`.
    case sgbrg8
    /// 8-bit Bayer mosaic, rows G R G R… / B G B G…. `V4L2_PIX_FMT_SGRBG8`.
    case sgrbg8
    /// 8-bit Bayer mosaic, rows R G R G… / G B G B…. `V4L2_PIX_FMT_SRGGB8`.
    case srggb8
    /// Packed 8-bit B, G, R, A (alpha 255), 4 bytes per pixel: what most image libraries and
    /// displays take (Core Video's `kCVPixelFormatType_32BGRA`). `V4L2_PIX_FMT_ABGR32` (`AR24`).
    case bgra

    public var description: String { rawValue.uppercased() }

    /// The four-character code V4L2 uses for this format.
    public var fourcc: UInt32 {
        switch self {
        case .yuyv: return fourCC("YUYV")
        case .uyvy: return fourCC("UYVY")
        case .nv12: return fourCC("NV12")
        case .i420: return fourCC("YU12")
        case .yuv422p: return fourCC("422P")
        case .grey: return fourCC("GREY")
        case .rgb24: return fourCC("RGB3")
        case .mjpeg: return fourCC("MJPG")
        case .bgr24: return fourCC("BGR3")
        case .sbggr8: return fourCC("BA81")
        case .sgbrg8: return fourCC("GBRG")
        case .sgrbg8: return fourCC("GRBG")
        case .srggb8: return fourCC("RGGB")
        case .bgra: return fourCC("AR24")
        }
    }

    /// The format with the given fourcc, if the engine handles it natively (`JPEG` counts as MJPEG).
    public init?(fourcc: UInt32) {
        if fourcc == fourCC("JPEG") { self = .mjpeg; return }
        guard let f = PixelFormat.allCases.first(where: { $0.fourcc == fourcc }) else { return nil }
        self = f
    }

    /// Parses a name such as `yuyv`, `NV12`, `yu12`, `mjpg`.
    public init?(name: String) {
        switch name.lowercased() {
        case "yuyv", "yuy2": self = .yuyv
        case "uyvy": self = .uyvy
        case "nv12": self = .nv12
        case "i420", "yu12", "yuv420", "yuv420p": self = .i420
        case "yuv422p", "422p", "i422": self = .yuv422p
        case "grey", "gray", "y8", "y800": self = .grey
        case "rgb24", "rgb3", "rgb": self = .rgb24
        case "mjpeg", "mjpg", "jpeg": self = .mjpeg
        case "bgr24", "bgr3", "bgr": self = .bgr24
        case "sbggr8", "ba81", "bggr": self = .sbggr8
        case "sgbrg8", "gbrg": self = .sgbrg8
        case "sgrbg8", "grbg": self = .sgrbg8
        case "srggb8", "rggb": self = .srggb8
        case "bgra", "bgra32", "ar24", "abgr32": self = .bgra
        default: return nil
        }
    }

    /// Whether frames carry compressed data of variable size.
    public var isCompressed: Bool { self == .mjpeg }

    /// Whether the format has chroma at half horizontal resolution (4:2:2 or 4:2:0): its width
    /// must be even.
    public var isSubsampled: Bool {
        switch self {
        case .yuyv, .uyvy, .nv12, .i420, .yuv422p: return true
        default: return false
        }
    }

    /// Whether the format is an 8-bit Bayer mosaic.
    public var isBayer: Bool {
        switch self {
        case .sbggr8, .sgbrg8, .sgrbg8, .srggb8: return true
        default: return false
        }
    }

    /// Whether frames carry luma (and chroma) planes that stages can read in place (YUV formats
    /// and GREY). The others — MJPEG, RGB, Bayer — reach stages through a decoded view
    /// (``Frame/pixels``) that the engine provides when a stage asks for pixels.
    public var hasYUVPlanes: Bool {
        switch self {
        case .yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey: return true
        default: return false
        }
    }
}

/// Builds a little-endian fourcc from four ASCII characters.
public func fourCC(_ s: StaticString) -> UInt32 {
    precondition(s.utf8CodeUnitCount == 4)
    let p = s.utf8Start
    return UInt32(p[0]) | UInt32(p[1]) << 8 | UInt32(p[2]) << 16 | UInt32(p[3]) << 24
}

/// Renders a fourcc as its four characters.
public func fourCCString(_ code: UInt32) -> String {
    let bytes = (0..<4).map { UInt8((code >> (8 * UInt32($0))) & 0xFF) }
    return String(decoding: bytes.map { $0 >= 32 && $0 < 127 ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
}

/// One plane of a frame: where it starts in the buffer and how its rows are laid out.
public struct PlaneGeometry: Sendable, Equatable {
    /// Byte offset of the plane's first row from the start of the frame's data.
    public var offset: Int
    /// Bytes from the start of one row to the start of the next.
    public var bytesPerRow: Int
    /// Width of the plane in samples (for packed formats, in pixels).
    public var width: Int
    /// Number of rows.
    public var height: Int
    /// Bytes the plane occupies (`bytesPerRow * height`).
    public var byteCount: Int { bytesPerRow * height }
}

/// The shape of a frame: pixel format, size and the geometry of its planes.
///
/// Uncompressed formats have a fixed size computed from their planes; MJPEG frames are variable and
/// `maxByteCount` is an upper bound for buffer allocation.
public struct FrameFormat: Sendable, Equatable, CustomStringConvertible {
    public var pixelFormat: PixelFormat
    public var width: Int
    public var height: Int
    /// Bytes per row of the first plane (V4L2's `bytesperline`); 0 for compressed formats.
    public var bytesPerRow: Int

    public init(_ pixelFormat: PixelFormat, width: Int, height: Int, bytesPerRow: Int? = nil) {
        precondition(width > 0 && height > 0, "frame size must be positive")
        self.pixelFormat = pixelFormat
        self.width = width
        self.height = height
        self.bytesPerRow = bytesPerRow ?? FrameFormat.minimumBytesPerRow(pixelFormat, width: width)
    }

    /// The tightest row pitch of the first plane.
    public static func minimumBytesPerRow(_ f: PixelFormat, width: Int) -> Int {
        switch f {
        case .yuyv, .uyvy: return width * 2
        case .rgb24, .bgr24: return width * 3
        case .bgra: return width * 4
        case .nv12, .i420, .yuv422p, .grey, .sbggr8, .sgbrg8, .sgrbg8, .srggb8: return width
        case .mjpeg: return 0
        }
    }

    public var description: String { "\(pixelFormat) \(width)x\(height)" }

    /// Number of planes (1 for packed and compressed formats).
    public var planeCount: Int {
        switch pixelFormat {
        case .nv12: return 2
        case .i420, .yuv422p: return 3
        default: return 1
        }
    }

    /// The geometry of plane `index`. Chroma planes of planar formats follow the luma plane with a
    /// pitch derived from the luma pitch, as V4L2's single-planar formats lay them out.
    public func plane(_ index: Int) -> PlaneGeometry {
        precondition(index >= 0 && index < planeCount, "plane index out of range")
        let cw = (width + 1) / 2
        let ch = (height + 1) / 2
        switch (pixelFormat, index) {
        case (.nv12, 1):
            return PlaneGeometry(offset: bytesPerRow * height, bytesPerRow: bytesPerRow, width: cw, height: ch)
        case (.i420, 1):
            return PlaneGeometry(offset: bytesPerRow * height, bytesPerRow: bytesPerRow / 2, width: cw, height: ch)
        case (.i420, 2):
            return PlaneGeometry(offset: bytesPerRow * height + (bytesPerRow / 2) * ch, bytesPerRow: bytesPerRow / 2, width: cw, height: ch)
        case (.yuv422p, 1):
            return PlaneGeometry(offset: bytesPerRow * height, bytesPerRow: bytesPerRow / 2, width: cw, height: height)
        case (.yuv422p, 2):
            return PlaneGeometry(offset: bytesPerRow * height + (bytesPerRow / 2) * height, bytesPerRow: bytesPerRow / 2, width: cw, height: height)
        case (.mjpeg, _):
            return PlaneGeometry(offset: 0, bytesPerRow: 0, width: width, height: height)
        default:
            return PlaneGeometry(offset: 0, bytesPerRow: bytesPerRow, width: width, height: height)
        }
    }

    /// Bytes an uncompressed frame occupies; for MJPEG, a generous upper bound.
    public var maxByteCount: Int {
        if pixelFormat == .mjpeg { return max(width * height * 3 / 2 + 65536, 1 << 16) }
        var total = 0
        for i in 0..<planeCount { let p = plane(i); total = max(total, p.offset + p.byteCount) }
        return total
    }

    /// Where luma lives: offset of the first sample, distance between samples, bytes per row.
    /// Packed 4:2:2 formats interleave luma with chroma (`pixelStride` 2); RGB, Bayer and MJPEG have
    /// no luma plane (their pixels are read through a decoded view, ``Frame/pixels``).
    public var lumaLayout: (offset: Int, pixelStride: Int, bytesPerRow: Int)? {
        switch pixelFormat {
        case .yuyv: return (0, 2, bytesPerRow)
        case .uyvy: return (1, 2, bytesPerRow)
        case .nv12, .i420, .yuv422p, .grey: return (0, 1, bytesPerRow)
        default: return nil
        }
    }
}
