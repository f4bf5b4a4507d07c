import CTurboJPEG
import CViewfinderJPEG
import Viewfinder

/// Chroma subsampling of an encoded JPEG.
public enum ChromaSubsampling: String, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// Full chroma resolution.
    case s444 = "444"
    /// Half horizontal chroma resolution (what YUYV cameras deliver).
    case s422 = "422"
    /// Half horizontal and vertical chroma resolution.
    case s420 = "420"
    /// Luma only.
    case grey = "grey"

    public var description: String { rawValue }

    var tj: Int32 {
        switch self {
        case .s444: return Int32(TJSAMP_444.rawValue)
        case .s422: return Int32(TJSAMP_422.rawValue)
        case .s420: return Int32(TJSAMP_420.rawValue)
        case .grey: return Int32(TJSAMP_GRAY.rawValue)
        }
    }

    init?(tj: Int32) {
        switch tj {
        case Int32(TJSAMP_444.rawValue): self = .s444
        case Int32(TJSAMP_422.rawValue): self = .s422
        case Int32(TJSAMP_420.rawValue): self = .s420
        case Int32(TJSAMP_GRAY.rawValue): self = .grey
        default: return nil
        }
    }

    /// Chroma plane size for a `width`x`height` image.
    func chromaSize(width: Int, height: Int) -> (Int, Int) {
        switch self {
        case .s444: return (width, height)
        case .s422: return ((width + 1) / 2, height)
        case .s420: return ((width + 1) / 2, (height + 1) / 2)
        case .grey: return (0, 0)
        }
    }

    /// The subsampling a pixel format carries natively.
    public static func native(for format: PixelFormat) -> ChromaSubsampling {
        switch format {
        case .yuyv, .uyvy, .yuv422p: return .s422
        case .nv12, .i420: return .s420
        case .grey: return .grey
        default: return .s422
        }
    }
}

/// A TurboJPEG compressor with its own handle and buffers: encodes YUYV, UYVY, NV12, I420,
/// YUV 4:2:2 planar, GREY and RGB24 frames.
///
/// Packed 4:2:2 input (YUYV, UYVY) kept at 4:2:2 is encoded straight from its packed rows:
/// libjpeg-turbo's raw-data interface takes one 8-row strip at a time, split into row buffers that
/// stay in the cache, so no full-frame planar copy is written and read back (the output is
/// byte-identical to a split followed by `tjCompressFromYUVPlanes`). Other packed and semi-planar
/// input is converted to planes (vectorised loops) and compressed with `tjCompressFromYUVPlanes`,
/// which skips TurboJPEG's colour conversion; planar input whose subsampling matches is compressed
/// in place. One encoder per thread: it is not thread-safe. Nothing is allocated per frame once the
/// buffers have grown to the frame size.
public final class JPEGEncoder {
    private let handle: tjhandle
    /// The strip-at-a-time encoder of packed 4:2:2 (made at the first such frame).
    private var packed: OpaquePointer?
    private var packedMessage = [CChar](repeating: 0, count: 256)
    private var scratch: UnsafeMutableRawPointer
    private var scratchCapacity: Int
    private var output: UnsafeMutablePointer<UInt8>
    private var outputCapacity: Int

    public init() throws {
        guard let h = tjInitCompress() else { throw SinkError.jpeg(operation: "tjInitCompress", message: "no handle") }
        handle = h
        scratchCapacity = 0
        scratch = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64)
        outputCapacity = 0
        output = tjAlloc(64)!
    }

    deinit {
        tjDestroy(handle)
        if let packed { vf_jpeg_packed_destroy(packed) }
        scratch.deallocate()
        tjFree(output)
    }

    private func ensureScratch(_ n: Int) {
        if n > scratchCapacity {
            scratch.deallocate()
            scratch = UnsafeMutableRawPointer.allocate(byteCount: n, alignment: 64)
            scratchCapacity = n
        }
    }

    private func ensureOutput(width: Int, height: Int, subsampling: ChromaSubsampling) {
        let need = Int(tjBufSize(Int32(width), Int32(height), subsampling.tj))
        if need > outputCapacity {
            tjFree(output)
            output = tjAlloc(Int32(need))!
            outputCapacity = need
        }
    }

    /// The subsampling the encoder will produce for `format` when asked for `requested`.
    public static func resolvedSubsampling(for format: PixelFormat, requested: ChromaSubsampling?) -> ChromaSubsampling {
        if format == .grey { return .grey }
        return requested ?? ChromaSubsampling.native(for: format)
    }

    /// Encodes the frame's pixels. The returned bytes live in the encoder's buffer and are valid
    /// until the next call — and only while the encoder is alive (`withExtendedLifetime` it when
    /// it is a temporary). `subsampling` nil keeps the source's own.
    /// A frame that carries a full-size decoded view (MJPEG, RGB or Bayer whose pixels a stage
    /// changed, or Bayer) is encoded from that view.
    public func encode(_ frame: Frame, quality: Int, subsampling: ChromaSubsampling? = nil) throws -> UnsafeRawBufferPointer {
        let f = JPEGEncoder.pixelSource(frame)
        return try encode(UnsafeRawPointer(f.data), byteCount: f.bytesUsed, format: f.format, quality: quality, subsampling: subsampling)
    }

    /// The frame whose pixels an encoder should read: the frame itself (YUV, RGB), or its
    /// full-size decoded view when a stage changed the pixels or the format is not encodable as is.
    public static func pixelSource(_ frame: Frame) -> Frame {
        let pf = frame.format.pixelFormat
        if pf.hasYUVPlanes { return frame }
        if let d = frame.decoded, d.format.width == frame.format.width, d.format.height == frame.format.height,
           frame.pixelsModified || !(pf == .rgb24 || pf == .bgr24 || pf == .bgra) {
            return d
        }
        return frame
    }

    /// Encodes raw pixels of `format` (at least `format.maxByteCount` bytes).
    public func encode(_ data: UnsafeRawPointer, byteCount: Int, format: FrameFormat, quality: Int, subsampling requested: ChromaSubsampling? = nil) throws -> UnsafeRawBufferPointer {
        guard (1...100).contains(quality) else { throw SinkError.invalidArgument(name: "quality", reason: "\(quality) is outside 1...100") }
        guard format.pixelFormat != .mjpeg else { throw SinkError.unsupportedFormat("MJPEG frames are already JPEG; pass them through or decode them first") }
        guard !format.pixelFormat.isBayer else { throw SinkError.unsupportedFormat("\(format.pixelFormat) is a Bayer mosaic: encode its decoded view (a stage that asks for pixels makes one)") }
        guard byteCount >= format.maxByteCount else {
            throw SinkError.corruptData("\(format) frame has \(byteCount) bytes, needs \(format.maxByteCount)")
        }
        let target = JPEGEncoder.resolvedSubsampling(for: format.pixelFormat, requested: requested)
        ensureOutput(width: format.width, height: format.height, subsampling: target)
        let src = data.assumingMemoryBound(to: UInt8.self)
        if format.pixelFormat == .rgb24 || format.pixelFormat == .bgr24 || format.pixelFormat == .bgra {
            return try compressRGB(src, format: format, subsampling: target, quality: quality)
        }
        if (format.pixelFormat == .yuyv || format.pixelFormat == .uyvy) && target == .s422 {
            return try compressPacked422(src, format: format, quality: quality)
        }
        let planes = try sourcePlanes(src, format: format, target: target)
        return try compressPlanes(planes, format: format, target: target, quality: quality)
    }

    /// Packed 4:2:2 to a 4:2:2 JPEG, one 8-row strip at a time (see the type's documentation).
    private func compressPacked422(_ src: UnsafePointer<UInt8>, format: FrameFormat, quality: Int) throws -> UnsafeRawBufferPointer {
        guard format.width % 2 == 0 else { throw SinkError.unsupportedFormat("packed 4:2:2 with odd width \(format.width)") }
        if packed == nil {
            guard let p = vf_jpeg_packed_create() else { throw SinkError.jpeg(operation: "jpeg_create_compress", message: "out of memory") }
            packed = p
        }
        let order: YUVSplit.Packed422Order = format.pixelFormat == .yuyv ? .yuyv : .uyvy
        var size = 0
        let rc = packedMessage.withUnsafeMutableBufferPointer { m in
            vf_jpeg_packed_encode(packed, src, format.bytesPerRow, Int32(format.width), Int32(format.height), Int32(order.yOffset), Int32(order.uOffset),
                                  Int32(quality), output, outputCapacity, &size, m.baseAddress, m.count)
        }
        if rc != 0 { throw SinkError.jpeg(operation: "jpeg_write_raw_data", message: packedMessage.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }) }
        return UnsafeRawBufferPointer(start: output, count: size)
    }

    private static let flags = TJFLAG_NOREALLOC | TJFLAG_FASTDCT

    private func compressRGB(_ src: UnsafePointer<UInt8>, format: FrameFormat, subsampling: ChromaSubsampling, quality: Int) throws -> UnsafeRawBufferPointer {
        var size: UInt = 0
        var out: UnsafeMutablePointer<UInt8>? = output
        let rc = tjCompress2(handle, src, Int32(format.width), Int32(format.bytesPerRow), Int32(format.height), Int32((format.pixelFormat == .bgr24 ? TJPF_BGR : format.pixelFormat == .bgra ? TJPF_BGRA : TJPF_RGB).rawValue),
                             &out, &size, subsampling.tj, Int32(quality), Self.flags)
        if rc != 0 { throw SinkError.jpeg(operation: "tjCompress2", message: String(cString: tjGetErrorStr2(handle))) }
        return UnsafeRawBufferPointer(start: out, count: Int(size))
    }

    /// The source's luma plane and its chroma planes at the source's own subsampling.
    private struct Planes {
        var y: UnsafePointer<UInt8>
        var yStride: Int
        var u: UnsafePointer<UInt8>
        var v: UnsafePointer<UInt8>
        var chromaStride = 0
    }

    /// Finds (planar formats) or makes in the scratch buffer (packed and semi-planar ones) the
    /// source's planes. The scratch buffer also keeps room for chroma resampled to `target`.
    private func sourcePlanes(_ src: UnsafePointer<UInt8>, format: FrameFormat, target: ChromaSubsampling) throws -> Planes {
        let w = format.width, h = format.height
        var planes = Planes(y: src, yStride: format.bytesPerRow, u: src, v: src)
        let (scw, sch) = ChromaSubsampling.native(for: format.pixelFormat).chromaSize(width: w, height: h)
        let (tcw, tch) = target.chromaSize(width: w, height: h)
        switch format.pixelFormat {
        case .yuyv, .uyvy:
            guard w % 2 == 0 else { throw SinkError.unsupportedFormat("packed 4:2:2 with odd width \(w)") }
            // Luma plane plus the chroma planes at 4:2:2 in the scratch buffer.
            let needY = w * h
            let needC = target == .grey ? 0 : scw * sch
            ensureScratch(needY + 2 * needC + 2 * tcw * tch + 64)
            let yDst = scratch.assumingMemoryBound(to: UInt8.self)
            let uDst = yDst + needY, vDst = uDst + needC
            YUVSplit.packed422(src, bytesPerRow: format.bytesPerRow, width: w, height: h, order: format.pixelFormat == .yuyv ? .yuyv : .uyvy,
                               y: yDst, u: needC > 0 ? uDst : nil, v: needC > 0 ? vDst : nil)
            planes = Planes(y: UnsafePointer(yDst), yStride: w, u: UnsafePointer(uDst), v: UnsafePointer(vDst), chromaStride: scw)
        case .nv12:
            let g = format.plane(1)
            let needC = scw * sch
            ensureScratch(2 * needC + 2 * tcw * tch + 64)
            let uDst = scratch.assumingMemoryBound(to: UInt8.self), vDst = uDst + needC
            if target != .grey { deinterleave(src + g.offset, bytesPerRow: g.bytesPerRow, width: scw, height: sch, u: uDst, v: vDst) }
            planes.u = UnsafePointer(uDst); planes.v = UnsafePointer(vDst); planes.chromaStride = scw
        case .i420, .yuv422p:
            let gu = format.plane(1), gv = format.plane(2)
            planes.u = src + gu.offset; planes.v = src + gv.offset; planes.chromaStride = gu.bytesPerRow
            ensureScratch(2 * tcw * tch + 64)
        case .grey:
            break // no chroma
        default:
            break // RGB is handled by the caller; MJPEG and Bayer are refused there
        }
        return planes
    }

    /// Compresses the planes, resampling the chroma into the end of the scratch buffer when the
    /// target subsampling differs from the source's.
    private func compressPlanes(_ source: Planes, format: FrameFormat, target: ChromaSubsampling, quality: Int) throws -> UnsafeRawBufferPointer {
        let w = format.width, h = format.height
        let srcSub = ChromaSubsampling.native(for: format.pixelFormat)
        let (scw, sch) = srcSub.chromaSize(width: w, height: h)
        let (tcw, tch) = target.chromaSize(width: w, height: h)
        var planes: [UnsafePointer<UInt8>?] = [source.y, nil, nil]
        var strides: [Int32] = [Int32(source.yStride), 0, 0]
        if target != .grey {
            if target == srcSub {
                planes[1] = source.u; planes[2] = source.v
                strides[1] = Int32(source.chromaStride); strides[2] = Int32(source.chromaStride)
            } else {
                let dstU = scratch.assumingMemoryBound(to: UInt8.self) + (scratchCapacity - 2 * tcw * tch - 64)
                let dstV = dstU + tcw * tch
                resampleChroma(source.u, stride: source.chromaStride, width: scw, height: sch, into: dstU, width: tcw, height: tch)
                resampleChroma(source.v, stride: source.chromaStride, width: scw, height: sch, into: dstV, width: tcw, height: tch)
                planes[1] = UnsafePointer(dstU); planes[2] = UnsafePointer(dstV)
                strides[1] = Int32(tcw); strides[2] = Int32(tcw)
            }
        }
        var size: UInt = 0
        var out: UnsafeMutablePointer<UInt8>? = output
        let rc = planes.withUnsafeMutableBufferPointer { pp in
            strides.withUnsafeBufferPointer { sp in
                tjCompressFromYUVPlanes(handle, pp.baseAddress!, Int32(w), sp.baseAddress!, Int32(h), target.tj, &out, &size, Int32(quality), Self.flags)
            }
        }
        if rc != 0 { throw SinkError.jpeg(operation: "tjCompressFromYUVPlanes", message: String(cString: tjGetErrorStr2(handle))) }
        return UnsafeRawBufferPointer(start: out, count: Int(size))
    }
}

/// Splits an interleaved UV plane (NV12) into U and V planes.
@inline(__always)
func deinterleave(_ src: UnsafePointer<UInt8>, bytesPerRow: Int, width: Int, height: Int, u: UnsafeMutablePointer<UInt8>, v: UnsafeMutablePointer<UInt8>) {
    for row in 0..<height {
        let s = src + row &* bytesPerRow
        let ud = u + row &* width, vd = v + row &* width
        var x = 0
        while x < width { ud[x] = s[x &* 2]; vd[x] = s[x &* 2 &+ 1]; x &+= 1 }
    }
}

/// Resamples a chroma plane by factors of two: columns are duplicated (to 4:4:4), rows are
/// averaged in pairs (4:2:2 → 4:2:0) or duplicated (4:2:0 → 4:2:2).
func resampleChroma(_ src: UnsafePointer<UInt8>, stride: Int, width sw: Int, height sh: Int,
                    into dst: UnsafeMutablePointer<UInt8>, width dw: Int, height dh: Int) {
    for row in 0..<dh {
        let d = dst + row &* dw
        let a: UnsafePointer<UInt8>, b: UnsafePointer<UInt8>
        if dh == sh { a = src + row &* stride; b = a }
        else if dh < sh { a = src + min(2 &* row, sh - 1) &* stride; b = src + min(2 &* row &+ 1, sh - 1) &* stride }
        else { a = src + min(row / 2, sh - 1) &* stride; b = a }
        if dw == sw {
            var x = 0
            while x < dw { d[x] = UInt8(truncatingIfNeeded: (UInt16(a[x]) &+ UInt16(b[x]) &+ 1) >> 1); x &+= 1 }
        } else {
            var x = 0
            while x < dw {
                let sx = min(x >> 1, sw - 1)
                d[x] = UInt8(truncatingIfNeeded: (UInt16(a[sx]) &+ UInt16(b[sx]) &+ 1) >> 1)
                x &+= 1
            }
        }
    }
}

/// A TurboJPEG decompressor, for MJPEG frames that must be re-encoded and for checking output.
public final class JPEGDecoder {
    private var handle: tjhandle

    public init() throws {
        guard let h = tjInitDecompress() else { throw SinkError.jpeg(operation: "tjInitDecompress", message: "no handle") }
        handle = h
    }
    deinit { tjDestroy(handle) }

    /// The size and subsampling a JPEG declares.
    public func header(_ jpeg: UnsafeRawBufferPointer) throws -> (width: Int, height: Int, subsampling: ChromaSubsampling?) {
        var w: Int32 = 0, h: Int32 = 0, s: Int32 = 0, cs: Int32 = 0
        guard let base = jpeg.baseAddress, tjDecompressHeader3(handle, base.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count), &w, &h, &s, &cs) == 0 else {
            let why = String(cString: tjGetErrorStr2(handle))
            // libjpeg-turbo 2.1 leaves the handle mid-header after a damaged header, and every
            // later call on it fails: start again with a fresh one (error path only).
            if let fresh = tjInitDecompress() { tjDestroy(handle); handle = fresh }
            throw SinkError.corruptData("not a JPEG: \(why)")
        }
        return (Int(w), Int(h), ChromaSubsampling(tj: s))
    }

    /// Whether `jpeg` decodes without error or warning (a truncated stream, a missing end marker,
    /// damaged entropy-coded data all fail). Decodes the luma at 1/8 scale into a reused buffer:
    /// every entropy-coded byte is still read, at a fraction of a full decode's cost.
    public func decodesCompletely(_ jpeg: UnsafeRawBufferPointer) -> Bool {
        guard jpeg.count >= 4, jpeg[0] == 0xFF, jpeg[1] == 0xD8, let base = jpeg.baseAddress,
              let hd = try? header(jpeg), hd.width > 0, hd.height > 0 else { return false }
        let w = (hd.width + 7) / 8, h = (hd.height + 7) / 8
        if checkScratch.count < w * h { checkScratch = [UInt8](repeating: 0, count: w * h) }
        let rc = checkScratch.withUnsafeMutableBufferPointer {
            tjDecompress2(handle, base.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count), $0.baseAddress, Int32(w), Int32(w), Int32(h),
                          Int32(TJPF_GRAY.rawValue), TJFLAG_STOPONWARNING | TJFLAG_FASTDCT)
        }
        return rc == 0
    }
    private var checkScratch: [UInt8] = []

    /// Decodes to planes: the luma plane (width x height) and the chroma planes at the JPEG's subsampling.
    public func decodePlanes(_ jpeg: UnsafeRawBufferPointer) throws -> (width: Int, height: Int, subsampling: ChromaSubsampling, y: [UInt8], u: [UInt8], v: [UInt8]) {
        let hd = try header(jpeg)
        guard let sub = hd.subsampling else { throw SinkError.unsupportedFormat("JPEG subsampling other than 4:4:4, 4:2:2, 4:2:0, grey") }
        let (cw, ch) = sub.chromaSize(width: hd.width, height: hd.height)
        var y = [UInt8](repeating: 0, count: hd.width * hd.height)
        var u = [UInt8](repeating: 128, count: cw * ch)
        var v = [UInt8](repeating: 128, count: cw * ch)
        var strides: [Int32] = [Int32(hd.width), Int32(cw), Int32(cw)]
        let rc = y.withUnsafeMutableBufferPointer { yb in
            u.withUnsafeMutableBufferPointer { ub in
                v.withUnsafeMutableBufferPointer { vb in
                    var planes: [UnsafeMutablePointer<UInt8>?] = [yb.baseAddress, sub == .grey ? nil : ub.baseAddress, sub == .grey ? nil : vb.baseAddress]
                    return planes.withUnsafeMutableBufferPointer { pp in
                        tjDecompressToYUVPlanes(handle, jpeg.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt(jpeg.count), pp.baseAddress!, Int32(hd.width), &strides, Int32(hd.height), 0)
                    }
                }
            }
        }
        if rc != 0 { throw SinkError.jpeg(operation: "tjDecompressToYUVPlanes", message: String(cString: tjGetErrorStr2(handle))) }
        return (hd.width, hd.height, sub, y, u, v)
    }
}
