import Testing
@testable import Viewfinder

/// A picture as 4:2:0 samples: luma per pixel, chroma per 2×2 block (so every layout can hold it
/// exactly).
private struct Picture {
    let width: Int, height: Int
    func y(_ x: Int, _ y: Int) -> UInt8 { UInt8(truncatingIfNeeded: x &* 7 &+ y &* 13 &+ (x * y) % 5) }
    func cb(_ x: Int, _ y: Int) -> UInt8 { UInt8(truncatingIfNeeded: 40 &+ (x / 2) &* 3 &+ (y / 2) &* 11) }
    func cr(_ x: Int, _ y: Int) -> UInt8 { UInt8(truncatingIfNeeded: 200 &- (x / 2) &* 5 &+ (y / 2) &* 2) }

    /// The picture written into `format`'s layout by hand (independently of the views).
    func frame(_ pf: PixelFormat) -> Frame {
        let fmt = FrameFormat(pf, width: width, height: height, bytesPerRow: pf == .yuyv || pf == .uyvy ? width * 2 + 8 : nil)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        let p = f.data.assumingMemoryBound(to: UInt8.self)
        let bpr = fmt.bytesPerRow
        for yy in 0..<height {
            for xx in 0..<width {
                switch pf {
                case .yuyv, .uyvy:
                    let base = yy * bpr + (xx / 2) * 4
                    let (yo, co) = pf == .yuyv ? (0, 1) : (1, 0)
                    p[base + (xx & 1) * 2 + yo] = y(xx, yy)
                    p[base + co] = cb(xx, yy & ~1); p[base + co + 2] = cr(xx, yy & ~1)
                case .nv12:
                    p[yy * bpr + xx] = y(xx, yy)
                    let uv = fmt.plane(1)
                    p[uv.offset + (yy / 2) * uv.bytesPerRow + (xx / 2) * 2] = cb(xx, yy)
                    p[uv.offset + (yy / 2) * uv.bytesPerRow + (xx / 2) * 2 + 1] = cr(xx, yy)
                case .i420, .yuv422p:
                    p[yy * bpr + xx] = y(xx, yy)
                    let u = fmt.plane(1), v = fmt.plane(2)
                    let row = pf == .i420 ? yy / 2 : yy
                    p[u.offset + row * u.bytesPerRow + xx / 2] = cb(xx, yy & ~1)
                    p[v.offset + row * v.bytesPerRow + xx / 2] = cr(xx, yy & ~1)
                case .grey:
                    p[yy * bpr + xx] = y(xx, yy)
                default:
                    fatalError("not a YUV format")
                }
            }
        }
        return f
    }
}

@Suite("Typed pixel views")
struct PixelViewTests {
    @Test("luma and chroma read the same in every YUV layout", arguments: [PixelFormat.yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey])
    func uniformAcrossLayouts(_ pf: PixelFormat) throws {
        let pic = Picture(width: 22, height: 14)
        let f = pic.frame(pf)
        let px = try #require(f.pixels)
        #expect(px.width == 22 && px.height == 14 && px.scale == 1)
        for y in 0..<14 {
            let row = px.luma.row(y)
            for x in 0..<22 {
                #expect(px.luma[x, y] == pic.y(x, y))
                #expect(row[x] == pic.y(x, y))
                let c = px.chroma(x, y)
                if pf == .grey { #expect(c == (128, 128)) } else { #expect(c.cb == pic.cb(x, y & ~1) && c.cr == pic.cr(x, y & ~1), "\(pf) (\(x), \(y))") }
            }
        }
        #expect(px.luma.rows.count == 14)
        var viaRows = 0, expected = 0
        for row in px.luma.rows { for v in row { viaRows += Int(v) } }
        for y in 0..<14 { for x in 0..<22 { expected += Int(pic.y(x, y)) } }
        #expect(viaRows == expected)
    }

    @Test("mutable views write where the read views read, and mark the frame changed", arguments: [PixelFormat.yuyv, .nv12, .i420, .yuv422p])
    func mutableViews(_ pf: PixelFormat) throws {
        let f = Picture(width: 16, height: 8).frame(pf)
        #expect(!f.pixelsModified)
        let m = try #require(f.mutablePixels())
        #expect(f.pixelsModified)
        m.luma[3, 5] = 250
        m.cb![1, m.cb!.height - 1] = 7
        m.luma.row(0)[15] = 1
        let px = try #require(f.pixels)
        #expect(px.luma[3, 5] == 250 && px.luma[15, 0] == 1)
        #expect(px.chroma(3, 7).cb == 7)
        m.luma.row(2).withMutableBytes { span in span[0] = 99 }
        #expect(px.luma[0, 2] == 99)
    }

    @Test("crops stay inside the plane; row spans cover the samples")
    func cropsAndSpans() throws {
        let f = Picture(width: 20, height: 10).frame(.yuyv)
        let l = try #require(f.pixels).luma
        let c = l.cropped(x: 15, y: 8, width: 10, height: 10)
        #expect(c.width == 5 && c.height == 2)
        #expect(c[0, 0] == l[15, 8] && c[4, 1] == l[19, 9])
        let n = l.row(3).withBytes { span in span.count }
        #expect(n == 39) // 20 samples 2 bytes apart
    }

    @Test("views refuse a buffer too small for the format")
    func tooSmall() {
        let fmt = FrameFormat(.i420, width: 64, height: 48)
        let f = Frame(capacity: fmt.maxByteCount - 1, format: fmt)
        #expect(f.pixels == nil)
        #expect(FramePixels(format: FrameFormat(.mjpeg, width: 64, height: 48), data: f.data, capacity: f.capacity) == nil)
    }

    @Test("the scale that serves every need")
    func scaleChoice() {
        let r = PixelRequests(format: FrameFormat(.mjpeg, width: 1920, height: 1080))
        #expect(r.scale(width: 1920, available: [1, 2, 4, 8]) == nil)
        try? r.need(.statistics(minimumWidth: 160), stage: "a")
        #expect(r.scale(width: 1920, available: [1, 2, 4, 8]) == 8)
        try? r.need(.statistics(minimumWidth: 320), stage: "b")
        #expect(r.scale(width: 1920, available: [1, 2, 4, 8]) == 4)
        #expect(r.scale(width: 640, available: [1, 2, 4, 8]) == 2)
        try? r.need(.modify, stage: "c")
        #expect(r.scale(width: 1920, available: [1, 2, 4, 8]) == 1)
        let none = PixelRequests(format: FrameFormat(.mjpeg, width: 64, height: 48), available: false)
        #expect(throws: ConfigurationError.self) { try none.need(.read, stage: "x") }
    }
}

@Suite("RGB and Bayer to planar YUV")
struct PixelConversionTests {
    /// Full-range BT.601, as the converter (and JPEG) uses.
    func yuv(_ r: Int, _ g: Int, _ b: Int) -> (Int, Int, Int) {
        let y = (77 * r + 150 * g + 29 * b + 128) >> 8
        let cb = ((-43 * r - 85 * g + 128 * b + 128) >> 8) + 128
        let cr = ((128 * r - 107 * g - 21 * b + 128) >> 8) + 128
        return (y, cb, cr)
    }

    /// A frame of one colour in `pf`.
    func solid(_ pf: PixelFormat, _ rgb: (Int, Int, Int), width: Int = 24, height: Int = 16) -> Frame {
        let fmt = FrameFormat(pf, width: width, height: height)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        let p = f.data.assumingMemoryBound(to: UInt8.self)
        let (r, g, b) = (UInt8(rgb.0), UInt8(rgb.1), UInt8(rgb.2))
        for y in 0..<height {
            for x in 0..<width {
                switch pf {
                case .rgb24: p[y * fmt.bytesPerRow + x * 3] = r; p[y * fmt.bytesPerRow + x * 3 + 1] = g; p[y * fmt.bytesPerRow + x * 3 + 2] = b
                case .bgr24: p[y * fmt.bytesPerRow + x * 3] = b; p[y * fmt.bytesPerRow + x * 3 + 1] = g; p[y * fmt.bytesPerRow + x * 3 + 2] = r
                default:
                    // Colour of (x, y) in the mosaic, from the pattern's name (first two letters: row 0).
                    let name = Array(pf.rawValue.dropFirst().prefix(4))
                    let c = name[(y & 1) * 2 + (x & 1)]
                    p[y * fmt.bytesPerRow + x] = c == "r" ? r : c == "b" ? b : g
                }
            }
        }
        return f
    }

    @Test("a solid colour converts to its YUV at every scale", arguments: [PixelFormat.rgb24, .bgr24, .sbggr8, .sgbrg8, .sgrbg8, .srggb8])
    func solidColour(_ pf: PixelFormat) throws {
        let conv = RGBBayerConverter()
        let src = solid(pf, (200, 120, 40))
        let want = yuv(200, 120, 40)
        for scale in [1, 2, 4, 8] {
            let out = Frame(capacity: conv.decodedByteCount(for: src.format, scale: scale), format: FrameFormat(.grey, width: 1, height: 1))
            try conv.decode(src, scale: scale, into: out)
            #expect(out.format.pixelFormat == .i420 && out.format.width == (24 + scale - 1) / scale)
            let px = try #require(out.pixels)
            for y in 0..<px.height { for x in 0..<px.width {
                #expect(abs(Int(px.luma[x, y]) - want.0) <= 1, "\(pf) 1/\(scale) (\(x), \(y))")
                let c = px.chroma(x, y)
                #expect(abs(Int(c.cb) - want.1) <= 1 && abs(Int(c.cr) - want.2) <= 1)
            } }
        }
    }

    @Test("Bayer luma follows a horizontal ramp at full size")
    func bayerRamp() throws {
        let fmt = FrameFormat(.srggb8, width: 64, height: 8)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        for y in 0..<8 { for x in 0..<64 { f.data.storeBytes(of: UInt8(x * 4), toByteOffset: y * 64 + x, as: UInt8.self) } }
        let conv = RGBBayerConverter()
        let out = Frame(capacity: conv.decodedByteCount(for: fmt, scale: 1), format: fmt)
        try conv.decode(f, scale: 1, into: out)
        let l = try #require(out.pixels).luma
        for x in 1..<62 { #expect(l[x + 1, 3] > l[x, 3], "luma not increasing at \(x)") }
    }
}

/// A stage that asks for pixels and records what it got.
final class PixelProbe: Stage {
    static let name = "pixel_probe"
    static let summary = "test"
    let need: PixelNeed
    var widths: [Int] = []
    var lumaSums: [Int] = []
    init(options: NoOptions) { need = .read }
    init(_ n: PixelNeed) { need = n }
    func prepare(format: FrameFormat, context: StageContext) throws { try context.pixels.need(need, stage: Self.name) }
    func process(_ frame: Frame) -> StageVerdict {
        guard let px = frame.pixels else { widths.append(0); return .forward }
        widths.append(px.width)
        var s = 0
        for y in 0..<px.height { let r = px.luma.row(y); for x in 0..<px.width { s &+= Int(r[x]) } }
        lumaSums.append(s)
        if need == .modify, let m = frame.mutablePixels() { m.luma[0, 0] = 255 }
        return .forward
    }
}

/// A decoder that fails on odd sequence numbers (a damaged frame) and fills luma with the sequence.
final class FlakyDecoder: PixelDecoder, PixelDecoderFactory, @unchecked Sendable {
    let scaleDenominators = [1, 2]
    func decodedByteCount(for format: FrameFormat, scale: Int) -> Int { FrameFormat(.grey, width: format.width / scale, height: format.height / scale).maxByteCount }
    func decode(_ source: Frame, scale: Int, into target: Frame) throws {
        if source.sequence % 2 == 1 { throw PixelConversionError.tooSmall }
        target.format = FrameFormat(.grey, width: source.format.width / scale, height: source.format.height / scale)
        target.bytesUsed = target.format.maxByteCount
        target.data.initializeMemory(as: UInt8.self, repeating: UInt8(truncatingIfNeeded: source.sequence), count: target.bytesUsed)
    }
    func makeDecoder(for format: FrameFormat) -> (any PixelDecoder)? { self }
}

/// Keeps each delivered frame's pixels-changed flag and luma at (0, 0).
final class PixelSink: FrameConsumer, @unchecked Sendable {
    let consumerName = "pixels"
    var ringCapacity: Int { 64 }
    let box = LockedBox<[(Bool, UInt8?)]>([])
    func consume(_ frame: Frame) { let v = (frame.pixelsModified, frame.pixels.map { $0.luma[0, 0] }); box.withLock { $0.append(v) } }
}

@Suite("Decoded views in the engine")
struct DecodedViewEngineTests {
    func run(_ device: String, _ format: PixelFormat, stage: PixelProbe, decoders: (any PixelDecoderFactory)? = nil) throws -> (EngineStatistics, PixelSink) {
        let src = try PatternSource(deviceString: device)
        let cfg = try src.configure(StreamRequest(pixelFormat: format, width: 64, height: 48, bufferCount: 8))
        let sink = PixelSink()
        let engine = CaptureEngine(source: src, configuration: cfg, stages: [stage], consumers: [sink], pixelDecoders: decoders)
        try engine.start()
        engine.waitUntilFinished()
        return (engine.statistics, sink)
    }

    @Test("RGB and Bayer streams: one view per frame at the scale asked for, changes reach the sinks", arguments: [PixelFormat.rgb24, .bgr24, .sgrbg8])
    func rgbBayer(_ pf: PixelFormat) throws {
        let reduced = PixelProbe(.statistics(minimumWidth: 16))
        let (st, _) = try run("pattern:paced=false,frames=30,copy=true", pf, stage: reduced)
        #expect(st.delivered == 30 && st.drops.total == 0)
        #expect(st.decodeScale == 4)
        #expect(reduced.widths == Array(repeating: 16, count: 30))
        let modify = PixelProbe(.modify)
        let (st2, sink) = try run("pattern:paced=false,frames=30,copy=true", pf, stage: modify)
        #expect(st2.delivered == 30 && st2.decodeScale == 1)
        #expect(modify.widths == Array(repeating: 64, count: 30))
        let seen = sink.box.withLock { $0 }
        #expect(seen.count == 30 && seen.allSatisfy { $0.0 && $0.1 == 255 })
    }

    @Test("YUV streams need no decoded view")
    func yuvNoDecode() throws {
        let p = PixelProbe(.statistics(minimumWidth: 16))
        let (st, _) = try run("pattern:paced=false,frames=10", .nv12, stage: p)
        #expect(st.decodeScale == 0 && st.delivered == 10)
        #expect(p.widths == Array(repeating: 64, count: 10))
    }

    @Test("a frame whose view cannot be made is dropped as corrupt; the books balance")
    func corruptCounted() throws {
        let p = PixelProbe(.statistics(minimumWidth: 32))
        // Bayer frames stand in for MJPEG: the given decoder comes before the core's conversion.
        let (st, sink) = try run("pattern:paced=false,frames=20", .sbggr8, stage: p, decoders: FlakyDecoder())
        #expect(st.captured == 20 && st.delivered == 10 && st.drops[.corrupt] == 10)
        #expect(p.widths == Array(repeating: 32, count: 10))
        #expect(sink.box.withLock { $0 }.count == 10)
    }

    @Test("without a decoder, a stage asking for pixels of MJPEG is refused with a clear error")
    func noDecoder() throws {
        let fmt = FrameFormat(.mjpeg, width: 64, height: 48)
        let ctx = StageContext(format: fmt, pixels: PixelRequests(format: fmt, available: false))
        #expect(throws: ConfigurationError.self) { try PixelProbe(.read).prepare(format: fmt, context: ctx) }
    }
}
