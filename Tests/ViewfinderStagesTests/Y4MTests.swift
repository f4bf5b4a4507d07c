import Testing
import Foundation
import Viewfinder

@Suite("YUV4MPEG2")
struct Y4MTests {
    func tempPath(_ name: String) -> String {
        NSTemporaryDirectory() + "vf-y4m-\(getpid())-\(name)"
    }

    @Test("header parsing: tags, defaults, colour spaces")
    func header() throws {
        let h = try Y4MHeader.parse(Array("YUV4MPEG2 W640 H480 F30000:1001 It A128:117 C420paldv XYSCSS=420PALDV".utf8))
        #expect(h.width == 640 && h.height == 480)
        #expect(h.rateNumerator == 30000 && h.rateDenominator == 1001)
        #expect(abs((h.interval?.fps ?? 0) - 29.97) < 0.001)
        #expect(h.interlacing == "t")
        #expect(h.aspect == (128, 117))
        #expect(h.pixelFormat == .i420)
        #expect(h.extras == ["XYSCSS=420PALDV"])
        #expect(h.frameByteCount == 640 * 480 * 3 / 2)
        // No C tag: 4:2:0 (jpeg siting).
        let d = try Y4MHeader.parse(Array("YUV4MPEG2 W3 H3".utf8))
        #expect(d.pixelFormat == .i420 && d.frameByteCount == 9 + 2 * 4)
        #expect(try Y4MHeader.parse(Array("YUV4MPEG2 W8 H2 C422".utf8)).pixelFormat == .yuv422p)
        #expect(try Y4MHeader.parse(Array("YUV4MPEG2 W8 H2 Cmono".utf8)).pixelFormat == .grey)
        for c in ["420jpeg", "420", "420mpeg2"] {
            #expect(try Y4MHeader.parse(Array("YUV4MPEG2 W8 H2 C\(c)".utf8)).pixelFormat == .i420)
        }
    }

    @Test("the engine's streams say they are full range (1 Dec: ffprobe reported color_range unknown)")
    func fullRange() throws {
        for f in [PixelFormat.i420, .yuv422p, .grey] {
            let h = Y4MHeader(width: 64, height: 48, pixelFormat: f, fps: FrameInterval(fps: 30))
            #expect(h.line.hasSuffix(" XCOLORRANGE=FULL\n"), "\(h.line)")
            #expect(try Y4MHeader.parse(Array(h.line.dropLast().utf8)) == h)
        }
        // As ffmpeg reads it.
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/ffprobe") else { return }
        let path = tempPath("range.y4m")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let h = Y4MHeader(width: 64, height: 48, pixelFormat: .i420, fps: FrameInterval(fps: 30))
        var bytes = Array(h.line.utf8) + Array("FRAME\n".utf8)
        bytes += [UInt8](repeating: 128, count: h.frameByteCount)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/ffprobe")
        p.arguments = ["-v", "error", "-show_entries", "stream=color_range", "-of", "csv=p=0", path]
        let pipe = Pipe()
        p.standardOutput = pipe
        try p.run()
        p.waitUntilExit()
        let out = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(out.trimmingCharacters(in: .whitespacesAndNewlines) == "pc", "ffprobe: \(out)")
    }

    @Test("bad headers are typed errors with the byte offset")
    func badHeaders() {
        #expect(throws: Y4MError.malformedHeader(offset: 0, reason: "does not start with 'YUV4MPEG2'")) { try Y4MHeader.parse(Array("RIFF....".utf8)) }
        #expect(throws: Y4MError.malformedHeader(offset: 15, reason: "bad height 'x'")) { try Y4MHeader.parse(Array("YUV4MPEG2 W640 Hx".utf8)) }
        #expect(throws: Y4MError.unsupported(offset: 18, reason: "colour space '444' (supported: 420jpeg, 420paldv, 420, 420mpeg2, 422, mono)")) {
            try Y4MHeader.parse(Array("YUV4MPEG2 W64 H48 C444".utf8))
        }
        #expect(throws: Y4MError.malformedHeader(offset: 0, reason: "no height (H) tag")) { try Y4MHeader.parse(Array("YUV4MPEG2 W64".utf8)) }
        // A tag given twice: which one the writer meant is unknown (3 Dec: the last won).
        #expect(throws: Y4MError.malformedHeader(offset: 23, reason: "tag 'C' is given twice")) { try Y4MHeader.parse(Array("YUV4MPEG2 W64 H48 C420 C422".utf8)) }
        #expect(throws: Y4MError.malformedHeader(offset: 14, reason: "tag 'W' is given twice")) { try Y4MHeader.parse(Array("YUV4MPEG2 W64 W32 H48".utf8)) }
        // X tags are the writer's own and may repeat.
        #expect((try? Y4MHeader.parse(Array("YUV4MPEG2 W64 H48 XA=1 XB=2".utf8)))?.extras.count == 2)
        #expect(throws: Y4MError.unsupported(offset: 0, reason: "65536x65536 is larger than 8192x8192 pixels")) { try Y4MHeader.parse(Array("YUV4MPEG2 W65536 H65536".utf8)) }
    }

    @Test("write then read back I420, 4:2:2 and mono, odd sizes included", arguments: [
        (PixelFormat.i420, 33, 17), (.yuv422p, 32, 8), (.grey, 5, 3), (.nv12, 16, 6), (.yuyv, 10, 4),
    ])
    func roundTrip(_ pf: PixelFormat, _ w: Int, _ h: Int) throws {
        let path = tempPath("rt-\(pf)-\(w)")
        defer { unlink(path) }
        let f = pf == .i420 ? FrameFormat(pf, width: w, height: h, bytesPerRow: (w + 1) & ~1) : FrameFormat(pf, width: w, height: h)
        let frames = (0..<3).map { i -> Frame in
            let fr = Frame(capacity: f.maxByteCount, format: f)
            let p = fr.data.assumingMemoryBound(to: UInt8.self)
            for k in 0..<f.maxByteCount { p[k] = UInt8(truncatingIfNeeded: k &* 31 &+ i &* 7) }
            return fr
        }
        let writer = try Y4MWriter(path: path, format: f, interval: FrameInterval(fps: 25))
        for fr in frames { try writer.write(fr) }
        writer.close()

        let reader = try Y4MReader(path: path)
        #expect(reader.header.width == w && reader.header.height == h)
        #expect(reader.header.interval == FrameInterval(fps: 25))
        let pool = reader.makePool(count: 2)
        var n = 0
        while true {
            let fr = try #require(pool.acquire())
            defer { fr.release() }
            guard try reader.read(into: fr) else { break }
            // Compare luma of every pixel and the first chroma sample of each row.
            let a = try #require(frames[n].format.lumaLayout), b = try #require(fr.format.lumaLayout)
            let pa = frames[n].data.assumingMemoryBound(to: UInt8.self), pb = fr.data.assumingMemoryBound(to: UInt8.self)
            for y in 0..<h { for x in 0..<w {
                #expect(pa[a.offset + y * a.bytesPerRow + x * a.pixelStride] == pb[b.offset + y * b.bytesPerRow + x * b.pixelStride])
            } }
            if pf == .i420 || pf == .yuv422p {
                for i in 1..<3 {
                    let g = f.plane(i)
                    for y in 0..<g.height { for x in 0..<g.width { #expect(pa[g.offset + y * g.bytesPerRow + x] == pb[fr.format.plane(i).offset + y * fr.format.plane(i).bytesPerRow + x]) } }
                }
            }
            #expect(fr.sequence == UInt64(n))
            n += 1
        }
        #expect(n == 3)
        #expect(reader.framesRead == 3)
    }

    @Test("a truncated last frame: every frame before it is read, then an error with the offset")
    func truncated() throws {
        let path = tempPath("trunc")
        defer { unlink(path) }
        let f = FrameFormat(.i420, width: 8, height: 4)
        let writer = try Y4MWriter(path: path, format: f)
        let fr = Frame(capacity: f.maxByteCount, format: f)
        for _ in 0..<3 { try writer.write(fr) }
        writer.close()
        let headerLen = writer.header.line.utf8.count
        let frameLen = 6 + 48
        // Cut 10 bytes into the third frame's picture.
        #expect(truncate(path, off_t(headerLen + 2 * frameLen + 6 + 10)) == 0)
        let reader = try Y4MReader(path: path)
        let dst = Frame(capacity: reader.format.maxByteCount, format: reader.format)
        #expect(try reader.read(into: dst))
        #expect(try reader.read(into: dst))
        #expect(throws: Y4MError.truncatedFrame(offset: headerLen + 2 * frameLen + 6 + 10, frame: 2, expected: 48, got: 10)) {
            _ = try reader.read(into: dst)
        }
    }

    @Test("a bad frame marker is an error naming its offset and frame")
    func badMarker() throws {
        let path = tempPath("marker")
        defer { unlink(path) }
        var bytes = Array("YUV4MPEG2 W2 H2 Cmono\nFRAME\n".utf8) + [1, 2, 3, 4]
        bytes += Array("FRAMX\n".utf8) + [5, 6, 7, 8]
        FileManager.default.createFile(atPath: path, contents: Data(bytes))
        let reader = try Y4MReader(path: path)
        let dst = Frame(capacity: 4, format: reader.format)
        #expect(try reader.read(into: dst))
        #expect(dst.data.load(as: UInt8.self) == 1)
        #expect(throws: Y4MError.malformedFrame(offset: 32, frame: 1, reason: "expected 'FRAME', got 'FRAMX'")) { _ = try reader.read(into: dst) }
        #expect(throws: Y4MError.self) { _ = try Y4MReader(path: tempPath("does-not-exist")) }
    }
}
