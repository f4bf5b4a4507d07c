import CTurboJPEG
import Viewfinder

/// Why an MJPEG frame could not be decoded. A consumer counts these as `DropReason.corrupt`.
public enum MJPEGError: Error, Equatable, CustomStringConvertible {
    case notJPEG
    case corrupt(String)
    case unsupportedSubsampling(Int32)
    case invalidScale(Int, allowed: [Int])
    case targetTooSmall(needed: Int, capacity: Int)
    case noDecoder(String)

    public var description: String {
        switch self {
        case .notJPEG: return "not a JPEG (no start-of-image marker)"
        case .corrupt(let m): return "corrupt JPEG: \(m)"
        case .unsupportedSubsampling(let s): return "JPEG chroma subsampling \(s) has no engine pixel format (4:2:2, 4:2:0 and greyscale decode)"
        case .invalidScale(let s, let a): return "scale 1/\(s) is not available (use 1/\(a.map(String.init).joined(separator: ", 1/")))"
        case .targetTooSmall(let n, let c): return "decoded frame needs \(n) bytes, the target frame has \(c)"
        case .noDecoder(let m): return "cannot create a TurboJPEG decoder: \(m)"
        }
    }
}

/// Decodes camera MJPEG frames to planar YUV with TurboJPEG, optionally at 1/2, 1/4 or 1/8 scale
/// (the DCT scaling makes a reduced decode much cheaper than a full one).
///
/// MJPEG frames pass through the engine untouched; a consumer that needs pixels owns one decoder
/// (a decoder is used by one thread at a time) and decodes into frames of its own pool.
/// 4:2:2 JPEGs (most webcams) decode to `PixelFormat.yuv422p`, 4:2:0 to `PixelFormat.i420`,
/// greyscale to `PixelFormat.grey`. Any decoder warning (a truncated or damaged stream) is an
/// error: a damaged frame is dropped, not shown half grey.
public final class MJPEGDecoder {
    public struct Header: Sendable, Equatable {
        public var width: Int
        public var height: Int
        /// TurboJPEG's `TJSAMP_*`.
        public var subsampling: Int32
        /// The engine format the planes decode to, if there is one.
        public var pixelFormat: PixelFormat? {
            switch subsampling {
            case Int32(TJSAMP_422.rawValue): return .yuv422p
            case Int32(TJSAMP_420.rawValue): return .i420
            case Int32(TJSAMP_GRAY.rawValue): return .grey
            default: return nil
            }
        }
    }

    /// Any warning (a truncated or damaged stream) is an error. The accurate integer IDCT, as
    /// `export`, stills' thumbnails, OpenCV's `imdecode` and FFmpeg's mjpeg decoder use: one
    /// camera JPEG decodes to the same planes whichever path reads it. The fast IDCT (GStreamer
    /// jpegdec's default) moved 40–48 % of the luma samples of a 1080p photograph by up to 4
    /// levels to save 4–11 % of the decode (0.3–0.5 ms a frame; `Benchmarks/cpp/tj_idct.c`,
    /// `Benchmarks/results/mjpeg-accurate-idct-2026-12-03.txt`).
    static let flags = TJFLAG_STOPONWARNING

    /// The scale denominators TurboJPEG decodes to directly.
    public static let scaleDenominators = [1, 2, 4, 8]

    private var handle: tjhandle

    public init() throws(MJPEGError) {
        guard let h = tjInitDecompress() else { throw .noDecoder(String(cString: tjGetErrorStr2(nil))) }
        handle = h
    }

    deinit { tjDestroy(handle) }

    private func message() -> String { String(cString: tjGetErrorStr2(handle)) }

    /// Reads the JPEG header: size and subsampling.
    public func header(_ jpeg: UnsafeRawBufferPointer) throws(MJPEGError) -> Header {
        guard jpeg.count >= 4, jpeg[0] == 0xFF, jpeg[1] == 0xD8, let base = jpeg.baseAddress else { throw .notJPEG }
        var w: Int32 = 0, h: Int32 = 0, sub: Int32 = 0, cs: Int32 = 0
        let r = tjDecompressHeader3(handle, base.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count), &w, &h, &sub, &cs)
        guard r == 0, w > 0, h > 0 else {
            let why = message()
            resetAfterHeaderFailure()
            throw .corrupt(why)
        }
        return Header(width: Int(w), height: Int(h), subsampling: sub)
    }

    /// libjpeg-turbo 2.1's `tjDecompressHeader3` does not abort the decompressor when the header
    /// is damaged: the handle stays mid-header and every later call on it fails ("Unsupported
    /// marker type"), so one garbage frame from a camera made every later frame corrupt. A fresh
    /// handle (on this error path only) starts clean. Regression test: CorruptMJPEGTests.
    private func resetAfterHeaderFailure() {
        guard let fresh = tjInitDecompress() else { return }
        tjDestroy(handle)
        handle = fresh
    }

    /// The format a decode at 1/`scaleDenominator` produces (even row pitch so chroma rows fit).
    public func outputFormat(for header: Header, scaleDenominator: Int = 1) throws(MJPEGError) -> FrameFormat {
        guard Self.scaleDenominators.contains(scaleDenominator) else { throw .invalidScale(scaleDenominator, allowed: Self.scaleDenominators) }
        guard let pf = header.pixelFormat else { throw .unsupportedSubsampling(header.subsampling) }
        let w = (header.width + scaleDenominator - 1) / scaleDenominator
        let h = (header.height + scaleDenominator - 1) / scaleDenominator
        return FrameFormat(pf, width: w, height: h, bytesPerRow: pf == .grey ? w : (w + 1) & ~1)
    }

    /// Decodes `jpeg` into `frame` (its memory must hold the output), setting its format and size.
    public func decode(_ jpeg: UnsafeRawBufferPointer, scaleDenominator: Int = 1, into frame: Frame) throws(MJPEGError) {
        let hdr = try header(jpeg)
        let fmt = try outputFormat(for: hdr, scaleDenominator: scaleDenominator)
        guard fmt.maxByteCount <= frame.capacity else { throw .targetTooSmall(needed: fmt.maxByteCount, capacity: frame.capacity) }
        // Stack storage for TurboJPEG's plane and stride arrays: no allocation per frame.
        let r = withUnsafeTemporaryAllocation(of: UnsafeMutablePointer<UInt8>?.self, capacity: 3) { p in
            withUnsafeTemporaryAllocation(of: Int32.self, capacity: 3) { s in
                for i in 0..<3 {
                    if i < fmt.planeCount {
                        let g = fmt.plane(i)
                        p[i] = (frame.data + g.offset).assumingMemoryBound(to: UInt8.self)
                        s[i] = Int32(g.bytesPerRow)
                    } else {
                        p[i] = nil; s[i] = 0
                    }
                }
                return tjDecompressToYUVPlanes(handle, jpeg.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count),
                                               p.baseAddress!, Int32(fmt.width), s.baseAddress!, Int32(fmt.height), Self.flags)
            }
        }
        guard r == 0 else { throw .corrupt(message()) }
        frame.format = fmt
        frame.bytesUsed = fmt.maxByteCount
    }

    /// Decodes only the luma of `jpeg` into `frame` as `PixelFormat/grey` at 1/`scaleDenominator`
    /// (any subsampling, 4:4:4 and 4:4:0 included: TurboJPEG converts to greyscale).
    public func decodeLuma(_ jpeg: UnsafeRawBufferPointer, scaleDenominator: Int = 1, into frame: Frame) throws(MJPEGError) {
        let hdr = try header(jpeg)
        guard Self.scaleDenominators.contains(scaleDenominator) else { throw .invalidScale(scaleDenominator, allowed: Self.scaleDenominators) }
        let w = (hdr.width + scaleDenominator - 1) / scaleDenominator
        let h = (hdr.height + scaleDenominator - 1) / scaleDenominator
        let fmt = FrameFormat(.grey, width: w, height: h)
        guard fmt.maxByteCount <= frame.capacity else { throw .targetTooSmall(needed: fmt.maxByteCount, capacity: frame.capacity) }
        let r = tjDecompress2(handle, jpeg.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count), frame.data.assumingMemoryBound(to: UInt8.self),
                              Int32(w), Int32(w), Int32(h), Int32(TJPF_GRAY.rawValue), Self.flags)
        guard r == 0 else { throw .corrupt(message()) }
        frame.format = fmt
        frame.bytesUsed = fmt.maxByteCount
    }

    /// Decodes an MJPEG `source` frame into `target`, copying its timing and metadata.
    public func decode(_ source: Frame, scaleDenominator: Int = 1, into target: Frame) throws(MJPEGError) {
        try decode(UnsafeRawBufferPointer(source.bytes), scaleDenominator: scaleDenominator, into: target)
        let fmt = target.format, used = target.bytesUsed
        target.copyAttributes(from: source)
        target.format = fmt
        target.bytesUsed = used
    }
}

/// Decodes MJPEG frames into frames of its own pool, for a consumer or stage that needs pixels.
///
/// The pool is sized on the first frame (from the JPEG header and the scale), so nothing is
/// allocated per frame afterwards. A damaged JPEG throws (count it as `DropReason.corrupt`);
/// nil means every decoded frame is still held (count it as `DropReason.outOfBuffers`).
/// Used by one thread at a time.
public final class MJPEGFrameDecoder {
    public let scaleDenominator: Int
    public let poolSize: Int
    private let decoder: MJPEGDecoder
    private var pool: FramePool?

    public init(scaleDenominator: Int = 1, poolSize: Int = 4) throws(MJPEGError) {
        guard MJPEGDecoder.scaleDenominators.contains(scaleDenominator) else {
            throw .invalidScale(scaleDenominator, allowed: MJPEGDecoder.scaleDenominators)
        }
        self.scaleDenominator = scaleDenominator
        self.poolSize = max(1, poolSize)
        self.decoder = try MJPEGDecoder()
    }

    /// The decoded frame (one reference, the caller releases it), with the source's timing and
    /// metadata; nil when the pool is exhausted.
    public func decode(_ source: Frame) throws(MJPEGError) -> Frame? {
        let jpeg = UnsafeRawBufferPointer(source.bytes)
        let fmt = try decoder.outputFormat(for: try decoder.header(jpeg), scaleDenominator: scaleDenominator)
        if pool == nil || pool!.frameCapacity < fmt.maxByteCount {
            pool = FramePool(format: fmt, count: poolSize)
        }
        guard let out = pool!.acquire() else { return nil }
        do {
            try decoder.decode(source, scaleDenominator: scaleDenominator, into: out)
        } catch {
            out.release()
            throw error
        }
        return out
    }
}
