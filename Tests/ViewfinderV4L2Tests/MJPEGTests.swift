import Testing
import CTurboJPEG
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// MJPEG passes through untouched; the decoder gives planar YUV (optionally scaled); damaged JPEGs
/// are errors (dropped as corrupt), never crashes.
@Suite struct MJPEGTests {
    @Test func mjpegPassesThroughUntouched() throws {
        let kernel = makeKernel()
        let jpeg = makeJPEG(width: 640, height: 480)
        kernel.setPayload { buf, _ in
            for (i, b) in jpeg.enumerated() { buf[i] = b }
            return jpeg.count
        }
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        let c = try cam.configure(StreamRequest(pixelFormat: .mjpeg, width: 640, height: 480))
        #expect(c.format.pixelFormat == .mjpeg)
        try cam.start()
        kernel.produce(1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        defer { f.release() }
        #expect(f.format.pixelFormat == .mjpeg)
        #expect(f.bytesUsed == jpeg.count)
        #expect(Array(f.bytes) == jpeg)

        let decoder = try MJPEGDecoder()
        let hdr = try decoder.header(UnsafeRawBufferPointer(f.bytes))
        #expect(hdr.width == 640 && hdr.height == 480 && hdr.pixelFormat == .yuv422p)
        let full = Frame(capacity: FrameFormat(.yuv422p, width: 640, height: 480).maxByteCount, format: FrameFormat(.yuv422p, width: 640, height: 480))
        try decoder.decode(f, into: full)
        #expect(full.format == FrameFormat(.yuv422p, width: 640, height: 480))
        #expect(full.sequence == f.sequence && full.timestamp == f.timestamp)
        // The ramp: left edge dark, right edge bright, chroma neutral.
        let y = full.plane(0)
        #expect(y[0] < 10 && y[639] > 245)
        #expect(abs(Int(full.plane(1)[100]) - 128) < 3)

        let quarter = Frame(capacity: 1 << 20, format: FrameFormat(.grey, width: 1, height: 1))
        try decoder.decode(f, scaleDenominator: 4, into: quarter)
        #expect(quarter.format.width == 160 && quarter.format.height == 120)
        #expect(quarter.plane(0)[159] > 240)
    }

    @Test func fourTwoZeroAndGreyDecode() throws {
        let decoder = try MJPEGDecoder()
        for (sub, pf) in [(TJSAMP_420, PixelFormat.i420), (TJSAMP_GRAY, .grey)] {
            let jpeg = makeJPEG(width: 322, height: 242, subsampling: sub)
            let out = Frame(capacity: 1 << 20, format: FrameFormat(.grey, width: 1, height: 1))
            try jpeg.withUnsafeBytes { try decoder.decode($0, scaleDenominator: 2, into: out) }
            #expect(out.format.pixelFormat == pf)
            #expect(out.format.width == 161 && out.format.height == 121)
        }
    }

    @Test func damagedJPEGsAreErrorsNotCrashes() throws {
        let decoder = try MJPEGDecoder()
        let good = makeJPEG(width: 320, height: 240)
        let target = Frame(capacity: 1 << 20, format: FrameFormat(.grey, width: 1, height: 1))
        // Truncated in the entropy-coded data.
        let truncated = Array(good.prefix(good.count / 2))
        #expect(throws: MJPEGError.self) { try truncated.withUnsafeBytes { try decoder.decode($0, into: target) } }
        // Garbage after a valid start marker.
        var garbage: [UInt8] = [0xFF, 0xD8]
        for i in 0..<4000 { garbage.append(UInt8(truncatingIfNeeded: i &* 7919)) }
        #expect(throws: MJPEGError.self) { try garbage.withUnsafeBytes { try decoder.decode($0, into: target) } }
        #expect(throws: MJPEGError.notJPEG) { try [UInt8](repeating: 0, count: 100).withUnsafeBytes { try decoder.decode($0, into: target) } }
        #expect(throws: MJPEGError.invalidScale(3, allowed: [1, 2, 4, 8])) { try good.withUnsafeBytes { try decoder.decode($0, scaleDenominator: 3, into: target) } }
        let small = Frame(capacity: 100, format: FrameFormat(.grey, width: 1, height: 1))
        #expect(throws: MJPEGError.targetTooSmall(needed: 320 * 240 * 2, capacity: 100)) { try good.withUnsafeBytes { try decoder.decode($0, into: small) } }
        // And the decoder still works afterwards.
        try good.withUnsafeBytes { try decoder.decode($0, into: target) }
        #expect(target.format == FrameFormat(.yuv422p, width: 320, height: 240))
    }

    /// Regression (issue 15): a JPEG whose header is damaged left libjpeg-turbo's handle
    /// mid-header, and every later frame failed to decode (one bad camera frame made all the rest
    /// corrupt for the stages and the video data output).
    @Test func aDamagedHeaderDoesNotBreakTheDecoderForLaterFrames() throws {
        let decoder = try MJPEGDecoder()
        let good = makeJPEG(width: 320, height: 240)
        let target = Frame(capacity: 1 << 20, format: FrameFormat(.grey, width: 1, height: 1))
        var garbage: [UInt8] = [0xFF, 0xD8]
        var x: UInt32 = 5
        for _ in 0..<6000 { x = x &* 1_103_515_245 &+ 12345; garbage.append(UInt8(truncatingIfNeeded: x >> 16)) }
        for _ in 0..<3 {
            #expect(throws: MJPEGError.self) { try garbage.withUnsafeBytes { try decoder.decode($0, into: target) } }
            try good.withUnsafeBytes { try decoder.decode($0, into: target) }
            #expect(target.format == FrameFormat(.yuv422p, width: 320, height: 240))
            #expect(try good.withUnsafeBytes { try decoder.header($0) }.width == 320)
        }
    }

    @Test func nonJPEGPayloadFromTheCameraIsACorruptDrop() throws {
        let kernel = makeKernel()
        kernel.setPayload { buf, _ in buf[0] = 0; buf[1] = 0; return 2000 }
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .mjpeg, width: 640, height: 480))
        try cam.start()
        kernel.produce(1)
        expectLost(try nextEvent(cam), .corrupt, 1)
    }
}

@Suite struct MJPEGFrameDecoderTests {
    @Test func decodesIntoItsOwnPoolAndReportsExhaustion() throws {
        let jpeg = makeJPEG(width: 640, height: 480)
        let src = Frame(capacity: 1 << 20, format: FrameFormat(.mjpeg, width: 640, height: 480))
        src.bytesUsed = jpeg.count
        for (i, b) in jpeg.enumerated() { src.data.storeBytes(of: b, toByteOffset: i, as: UInt8.self) }
        src.sequence = 42
        let d = try MJPEGFrameDecoder(scaleDenominator: 2, poolSize: 2)
        let a = try #require(try d.decode(src))
        let b = try #require(try d.decode(src))
        #expect(a.format == FrameFormat(.yuv422p, width: 320, height: 240))
        #expect(a.sequence == 42 && a.referenceCount == 1)
        #expect(try d.decode(src) == nil) // both pool frames held
        a.release()
        let c = try #require(try d.decode(src))
        c.release(); b.release()
        src.bytesUsed = jpeg.count / 3 // damaged
        #expect(throws: MJPEGError.self) { try d.decode(src) }
        #expect(throws: MJPEGError.invalidScale(5, allowed: [1, 2, 4, 8])) { try MJPEGFrameDecoder(scaleDenominator: 5) }
    }
}
