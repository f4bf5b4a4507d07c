import CViewfinderKernels

/// Why a frame could not be converted for an output.
public enum FrameConversionError: Error, Equatable, CustomStringConvertible {
    /// The output cannot produce this pixel format (see ``FrameConverter/outputPixelFormats``).
    case unsupportedTarget(PixelFormat)
    /// Frames of this format cannot be read without a decoder, and none was given (MJPEG needs
    /// the device's decoder: `CaptureDevice.pixelDecoders`).
    case noDecoder(PixelFormat)
    /// The frame's data does not decode (a corrupt JPEG) or is shorter than its format says.
    case corrupt(String)
    /// The rotation is not 0, 90, 180 or 270 degrees.
    case unsupportedRotation(Int)
    /// A video output's ``VideoOutputSettings/bufferCount`` below 1 (it delivers from that many
    /// frames of its own).
    case invalidBufferCount(Int)

    public var description: String {
        switch self {
        case .unsupportedTarget(let f): return "cannot convert frames to \(f); outputs deliver \(FrameConverter.outputPixelFormats.map(\.rawValue).joined(separator: ", "))"
        case .noDecoder(let f): return "no decoder for \(f) frames"
        case .corrupt(let why): return "corrupt frame: \(why)"
        case .unsupportedRotation(let a): return "rotation \(a)° is not 0, 90, 180 or 270"
        case .invalidBufferCount(let n): return "bufferCount \(n) is too small: an output needs at least 1 frame of its own"
        }
    }
}

/// Converts frames of any stream format (packed or planar YUV, GREY, RGB, BGRA, Bayer, MJPEG)
/// into one pixel format, turned clockwise by a multiple of 90° and mirrored on request: what a
/// ``VideoDataOutput`` with ``VideoOutputSettings`` does once per delivered frame on its thread.
///
/// Colour conversions use full-range BT.601, as JPEG does (the engine's decoded views use the
/// same). 4:2:2 chroma becomes 4:2:0 by averaging row pairs. A compressed or mosaic frame is decoded
/// once, at full size, into a buffer the converter keeps; the scratch buffers are allocated on the
/// first frame of a format and reused after, so a steady stream allocates nothing.
///
/// Not thread-safe: one converter per thread.
public final class FrameConverter {
    /// The formats a converter (and so a video data output) can deliver.
    public static let outputPixelFormats: [PixelFormat] = [.bgra, .rgb24, .bgr24, .nv12, .i420, .grey]

    /// The requested format; nil keeps the stream's (converted to I420 only where a 90° turn of a
    /// packed 4:2:2 or mosaic format has no layout of its own).
    public let target: PixelFormat?
    public let rotation: Int
    public let mirrored: Bool
    private let decoders: (any PixelDecoderFactory)?
    private var decoder: (any PixelDecoder)?
    private var decoderFormat: FrameFormat?
    private var decoded: Frame?
    private let rgbBayer = RGBBayerConverter()
    private var unturned: Frame?

    /// - Parameters:
    ///   - target: the pixel format to deliver, one of ``outputPixelFormats``; nil for the stream's own.
    ///   - rotation: degrees clockwise, 0, 90, 180 or 270.
    ///   - mirrored: flip left-right after the rotation.
    ///   - decoders: makes the decoder for MJPEG frames (the device's `pixelDecoders`); RGB and
    ///     Bayer are handled without it.
    public init(target: PixelFormat?, rotation: Int = 0, mirrored: Bool = false, decoders: (any PixelDecoderFactory)? = nil) throws(FrameConversionError) {
        if let target, !Self.outputPixelFormats.contains(target) { throw .unsupportedTarget(target) }
        guard [0, 90, 180, 270].contains(rotation) else { throw .unsupportedRotation(rotation) }
        self.target = target
        self.rotation = rotation
        self.mirrored = mirrored
        self.decoders = decoders
    }

    /// Whether frames of `format` pass through unchanged.
    public func isIdentity(for format: FrameFormat) -> Bool {
        rotation == 0 && !mirrored && (target == nil || target == format.pixelFormat)
    }

    /// The pixel format frames of `input` come out in.
    public func outputPixelFormat(for input: PixelFormat) -> PixelFormat {
        if let target { return target }
        switch input {
        case .i420, .nv12, .grey, .rgb24, .bgr24, .bgra: return input
        case .yuyv, .uyvy, .yuv422p: return rotation == 0 || rotation == 180 ? input : .i420
        default: return .i420
        }
    }

    /// The format of what `convert` makes from frames of `input` (tightly packed rows; even pitch
    /// for 4:2:0 so that the chroma planes' pitch is exact).
    public func outputFormat(for input: FrameFormat) -> FrameFormat {
        let pf = outputPixelFormat(for: input.pixelFormat)
        let turned = rotation == 90 || rotation == 270
        let w = turned ? input.height : input.width, h = turned ? input.width : input.height
        switch pf {
        case .i420, .nv12: return FrameFormat(pf, width: w, height: h, bytesPerRow: (w + 1) & ~1)
        default: return FrameFormat(pf, width: w, height: h)
        }
    }

    /// Converts `frame` into `output` (capacity at least `outputFormat(for:).maxByteCount`), and
    /// copies sequence, timestamps and metadata. Throws ``FrameConversionError/corrupt(_:)`` for
    /// data that does not decode.
    public func convert(_ frame: Frame, into output: Frame) throws(FrameConversionError) {
        let outFormat = outputFormat(for: frame.format)
        guard output.capacity >= outFormat.maxByteCount else { throw .corrupt("output buffer of \(output.capacity) bytes is smaller than \(outFormat.maxByteCount)") }
        let unturnedFormat = FrameFormat(outFormat.pixelFormat, width: frame.format.width, height: frame.format.height,
                                         bytesPerRow: outFormat.pixelFormat == .i420 || outFormat.pixelFormat == .nv12 ? (frame.format.width + 1) & ~1 : nil)
        let needsTurn = rotation != 0 || mirrored
        let stage: Frame
        if needsTurn {
            stage = scratch(&unturned, capacity: unturnedFormat.maxByteCount)
        } else {
            stage = output
        }
        try convertPixels(frame, format: unturnedFormat, into: stage)
        if needsTurn { turn(stage, format: unturnedFormat, into: output, outFormat: outFormat) }
        output.copyAttributes(from: frame)
        output.format = outFormat
        output.bytesUsed = outFormat.maxByteCount
    }

    // MARK: - Conversion without rotation

    private func scratch(_ slot: inout Frame?, capacity: Int) -> Frame {
        if let f = slot, f.capacity >= capacity { return f }
        let f = Frame(capacity: capacity, format: FrameFormat(.grey, width: 1, height: 1))
        slot = f
        return f
    }

    /// The frame's pixels as YUV planes: its own, its full-size decoded view, or decoded here.
    private func yuvPixels(of frame: Frame) throws(FrameConversionError) -> FramePixels {
        let f = frame.format
        if f.pixelFormat.hasYUVPlanes {
            guard let p = FramePixels(format: f, data: frame.data, capacity: frame.capacity) else { throw .corrupt("\(f) frame of \(frame.capacity) bytes") }
            return p
        }
        if let d = frame.decoded, d.format.width == f.width, d.format.height == f.height, d.format.pixelFormat.hasYUVPlanes,
           let p = FramePixels(format: d.format, data: d.data, capacity: d.capacity) {
            return p
        }
        if RGBBayerConverter.handles(f.pixelFormat) {
            let target = scratch(&decoded, capacity: rgbBayer.decodedByteCount(for: f, scale: 1))
            do { try rgbBayer.decode(frame, scale: 1, into: target) } catch { throw .corrupt("\(f) frame of \(frame.bytesUsed) bytes") }
            guard let p = FramePixels(format: target.format, data: target.data, capacity: target.capacity) else { throw .corrupt("\(f)") }
            return p
        }
        if decoder == nil || decoderFormat != f {
            guard let d = decoders?.makeDecoder(for: f) else { throw .noDecoder(f.pixelFormat) }
            decoder = d
            decoderFormat = f
        }
        let dec = decoder!
        let target = scratch(&decoded, capacity: dec.decodedByteCount(for: f, scale: 1))
        do { try dec.decode(frame, scale: 1, into: target) } catch { throw .corrupt("\(f.pixelFormat) frame \(frame.sequence) does not decode: \(error)") }
        guard let p = FramePixels(format: target.format, data: target.data, capacity: target.capacity) else { throw .corrupt("decoded \(target.format)") }
        return p
    }

    private static func rgbLayout(_ pf: PixelFormat) -> (channels: Int32, r: Int32, b: Int32)? {
        switch pf {
        case .rgb24: return (3, 0, 2)
        case .bgr24: return (3, 2, 0)
        case .bgra: return (4, 2, 0)
        default: return nil
        }
    }

    private func convertPixels(_ frame: Frame, format out: FrameFormat, into dst: Frame) throws(FrameConversionError) {
        let src = frame.format
        let w = src.width, h = src.height
        let d = dst.data.assumingMemoryBound(to: UInt8.self)
        // The same format: a copy row by row (pitches may differ).
        if src.pixelFormat == out.pixelFormat, !src.pixelFormat.isCompressed {
            let need = src.maxByteCount
            guard frame.capacity >= need else { throw .corrupt("\(src) frame of \(frame.capacity) bytes") }
            for i in 0..<src.planeCount {
                let sp = src.plane(i), dp = out.plane(i)
                let rowBytes = min(sp.bytesPerRow, dp.bytesPerRow, i == 0 ? FrameFormat.minimumBytesPerRow(src.pixelFormat, width: w) : sp.bytesPerRow)
                for y in 0..<sp.height {
                    (d + dp.offset + y * dp.bytesPerRow).update(from: frame.data.assumingMemoryBound(to: UInt8.self) + sp.offset + y * sp.bytesPerRow, count: rowBytes)
                }
            }
            return
        }
        // Packed RGB to packed RGB: re-order.
        if let s = Self.rgbLayout(src.pixelFormat), let t = Self.rgbLayout(out.pixelFormat) {
            guard frame.capacity >= src.bytesPerRow * (h - 1) + w * Int(s.channels) else { throw .corrupt("\(src) frame of \(frame.capacity) bytes") }
            let base = UnsafePointer(frame.data.assumingMemoryBound(to: UInt8.self))
            for y in 0..<h {
                vf_rgb_reorder_row(base + y * src.bytesPerRow, s.channels, s.r, s.b, w, d + y * out.bytesPerRow, t.channels, t.r, t.b)
            }
            return
        }
        let px = try yuvPixels(of: frame)
        let lumaBase = px.luma.unsafeBaseAddress, lumaPitch = px.luma.bytesPerRow, lumaStep = px.luma.sampleStride
        if let t = Self.rgbLayout(out.pixelFormat) {
            for y in 0..<h {
                let yrow = lumaBase + y * lumaPitch
                if let cb = px.cb, let cr = px.cr {
                    let cy = y / px.chromaStepY
                    vf_yuv_to_rgb_row(yrow, lumaStep, cb.unsafeBaseAddress + cy * cb.bytesPerRow, cr.unsafeBaseAddress + cy * cr.bytesPerRow,
                                      cb.sampleStride, w, d + y * out.bytesPerRow, t.channels, t.r, t.b)
                } else {
                    vf_yuv_to_rgb_row(yrow, lumaStep, nil, nil, 0, w, d + y * out.bytesPerRow, t.channels, t.r, t.b)
                }
            }
            return
        }
        // YUV targets: luma, then chroma at the target's layout.
        for y in 0..<h { vf_gather_row(lumaBase + y * lumaPitch, nil, lumaStep, w, d + y * out.bytesPerRow, 1) }
        switch out.pixelFormat {
        case .grey:
            return
        case .i420, .nv12:
            let ch = (h + 1) / 2, cw = (w + 1) / 2
            let uPlane = out.plane(1)
            let vPlane = out.pixelFormat == .i420 ? out.plane(2) : uPlane
            let dstStep = out.pixelFormat == .nv12 ? 2 : 1
            let vOffset = out.pixelFormat == .nv12 ? 1 : 0
            for cy in 0..<ch {
                let ud = d + uPlane.offset + cy * uPlane.bytesPerRow
                let vd = d + vPlane.offset + cy * vPlane.bytesPerRow + vOffset
                guard let cb = px.cb, let cr = px.cr else {
                    for x in 0..<cw { ud[x * dstStep] = 128; vd[x * dstStep] = 128 }
                    continue
                }
                let n = min(cw, cb.width)
                if px.chromaStepY == 2 {
                    let r = min(cy, cb.height - 1)
                    vf_gather_row(cb.unsafeBaseAddress + r * cb.bytesPerRow, nil, cb.sampleStride, n, ud, dstStep)
                    vf_gather_row(cr.unsafeBaseAddress + r * cr.bytesPerRow, nil, cr.sampleStride, n, vd, dstStep)
                } else {
                    let r0 = min(2 * cy, cb.height - 1), r1 = min(2 * cy + 1, cb.height - 1)
                    vf_gather_row(cb.unsafeBaseAddress + r0 * cb.bytesPerRow, cb.unsafeBaseAddress + r1 * cb.bytesPerRow, cb.sampleStride, n, ud, dstStep)
                    vf_gather_row(cr.unsafeBaseAddress + r0 * cr.bytesPerRow, cr.unsafeBaseAddress + r1 * cr.bytesPerRow, cr.sampleStride, n, vd, dstStep)
                }
                // An odd width whose source chroma is one sample short repeats the last sample.
                if n < cw, n > 0 { for x in n..<cw { ud[x * dstStep] = ud[(n - 1) * dstStep]; vd[x * dstStep] = vd[(n - 1) * dstStep] } }
            }
        case .yuyv, .uyvy, .yuv422p:
            // Only when the stream's own 4:2:2 format is kept at 0°/180°, which the copy above or the
            // turn below handles; a different 4:2:2 target is not offered.
            throw .unsupportedTarget(out.pixelFormat)
        default:
            throw .unsupportedTarget(out.pixelFormat)
        }
    }

    // MARK: - Rotation and mirroring

    private func turn(_ src: Frame, format sf: FrameFormat, into dst: Frame, outFormat df: FrameFormat) {
        let s = UnsafePointer(src.data.assumingMemoryBound(to: UInt8.self))
        let d = dst.data.assumingMemoryBound(to: UInt8.self)
        let m: Int32 = mirrored ? 1 : 0
        let r = Int32(rotation)
        switch sf.pixelFormat {
        case .rgb24, .bgr24:
            vf_rotate_plane(s, sf.bytesPerRow, sf.width, sf.height, 3, d, df.bytesPerRow, r, m)
        case .bgra:
            vf_rotate_plane(s, sf.bytesPerRow, sf.width, sf.height, 4, d, df.bytesPerRow, r, m)
        case .grey:
            vf_rotate_plane(s, sf.bytesPerRow, sf.width, sf.height, 1, d, df.bytesPerRow, r, m)
        case .i420:
            for i in 0..<3 {
                let sp = sf.plane(i), dp = df.plane(i)
                vf_rotate_plane(s + sp.offset, sp.bytesPerRow, sp.width, sp.height, 1, d + dp.offset, dp.bytesPerRow, r, m)
            }
        case .nv12:
            vf_rotate_plane(s, sf.bytesPerRow, sf.width, sf.height, 1, d, df.bytesPerRow, r, m)
            let sp = sf.plane(1), dp = df.plane(1)
            vf_rotate_plane(s + sp.offset, sp.bytesPerRow, sp.width, sp.height, 2, d + dp.offset, dp.bytesPerRow, r, m)
        case .yuyv, .uyvy:
            // 180° (mirrored or not) and a plain mirror keep 4:2:2 pairs: turn 4-byte pairs, then
            // swap the two lumas of each pair.
            let pairs = sf.width / 2
            vf_rotate_plane(s, sf.bytesPerRow, pairs, sf.height, 4, d, df.bytesPerRow, r, m)
            let y0 = sf.pixelFormat == .yuyv ? 0 : 1
            for y in 0..<df.height {
                let row = d + y * df.bytesPerRow
                for p in 0..<pairs { let a = row[p * 4 + y0]; row[p * 4 + y0] = row[p * 4 + y0 + 2]; row[p * 4 + y0 + 2] = a }
            }
        case .yuv422p:
            for i in 0..<3 {
                let sp = sf.plane(i), dp = df.plane(i)
                vf_rotate_plane(s + sp.offset, sp.bytesPerRow, sp.width, sp.height, 1, d + dp.offset, dp.bytesPerRow, r, m)
            }
        default:
            break
        }
    }
}
