import Testing
import Foundation
@testable import Viewfinder

/// A frame of `format` filled with reproducible noise.
private func noiseFrame(_ format: FrameFormat, seed: UInt32 = 7, sequence: UInt64 = 3) -> Frame {
    let f = Frame(capacity: format.maxByteCount, format: format)
    var x = seed &* 0x9E37_79B9 | 1
    let p = f.data.assumingMemoryBound(to: UInt8.self)
    for i in 0..<format.maxByteCount { x ^= x << 13; x ^= x >> 17; x ^= x << 5; p[i] = UInt8(truncatingIfNeeded: x) }
    f.bytesUsed = format.maxByteCount
    f.sequence = sequence
    return f
}

private func byte(_ f: Frame, _ offset: Int) -> Int { Int(f.data.load(fromByteOffset: offset, as: UInt8.self)) }

/// Full-range BT.601 (JPEG) in floating point: the reference the integer kernels must match to ±1.
private func rgbReference(_ y: Int, _ cb: Int, _ cr: Int) -> (Int, Int, Int) {
    let Y = Double(y), U = Double(cb) - 128, V = Double(cr) - 128
    func c(_ v: Double) -> Int { min(max(Int(v.rounded()), 0), 255) }
    return (c(Y + 1.402 * V), c(Y - 0.344136 * U - 0.714136 * V), c(Y + 1.772 * U))
}

/// Where sensor pixel (sx, sy) of a w×h picture lands in the turned/mirrored output, by the
/// connection's own point mapping (pixel centres), so outputs and points of interest agree.
private func userPixel(_ sx: Int, _ sy: Int, w: Int, h: Int, rotation: Int, mirrored: Bool) -> (Int, Int) {
    let p = CaptureConnection.userPoint(fromSensorPoint: NormalizedPoint(x: (Double(sx) + 0.5) / Double(w), y: (Double(sy) + 0.5) / Double(h)),
                                        rotation: rotation, mirrored: mirrored)
    let (ow, oh) = rotation == 90 || rotation == 270 ? (h, w) : (w, h)
    return (Int(p.x * Double(ow)), Int(p.y * Double(oh)))
}

@Suite struct FrameConverterTests {
    static let yuvSources: [PixelFormat] = [.yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey]

    @Test(arguments: yuvSources)
    func yuvToPackedRGBMatchesBT601(source: PixelFormat) throws {
        let inFormat = FrameFormat(source, width: 10, height: 6)
        let src = noiseFrame(inFormat)
        let px = try #require(FramePixels(format: inFormat, data: src.data, capacity: src.capacity))
        for target in [PixelFormat.bgra, .rgb24, .bgr24] {
            let conv = try FrameConverter(target: target)
            let outFormat = conv.outputFormat(for: inFormat)
            let out = Frame(capacity: outFormat.maxByteCount, format: outFormat)
            try conv.convert(src, into: out)
            #expect(out.format == FrameFormat(target, width: 10, height: 6))
            #expect(out.sequence == 3)
            let n = target == .bgra ? 4 : 3
            let (ri, bi) = target == .rgb24 ? (0, 2) : (2, 0)
            var worst = 0, greenBias = 0
            for y in 0..<6 { for x in 0..<10 {
                let c = px.chroma(x, y)
                let (r, g, b) = rgbReference(Int(px.y(x, y)), Int(c.cb), Int(c.cr))
                let o = y * out.format.bytesPerRow + x * n
                worst = max(worst, abs(byte(out, o + ri) - r), abs(byte(out, o + 1) - g), abs(byte(out, o + bi) - b))
                greenBias += byte(out, o + 1) - g
                if n == 4 { #expect(byte(out, o + 3) == 255) }
            } }
            #expect(worst <= 1, "\(source) → \(target): worst channel error \(worst)")
            // No channel leans one way (3 Dec: green was rounded down a half twice, one level high
            // on almost every pixel: +57 over these 60).
            #expect(abs(greenBias) <= 3, "\(source) → \(target): green off by \(greenBias) over 60 pixels")
        }
    }

    @Test(arguments: yuvSources)
    func yuvToPlanarKeepsLumaAndAveragesChroma(source: PixelFormat) throws {
        let inFormat = FrameFormat(source, width: 10, height: 6)
        let src = noiseFrame(inFormat)
        let px = try #require(FramePixels(format: inFormat, data: src.data, capacity: src.capacity))
        for target in [PixelFormat.i420, .nv12, .grey] {
            let conv = try FrameConverter(target: target)
            let out = Frame(capacity: conv.outputFormat(for: inFormat).maxByteCount, format: inFormat)
            try conv.convert(src, into: out)
            let opx = try #require(FramePixels(format: out.format, data: out.data, capacity: out.capacity))
            for y in 0..<6 { for x in 0..<10 { #expect(opx.y(x, y) == px.y(x, y)) } }
            guard target != .grey else { #expect(opx.cb == nil); continue }
            for cy in 0..<3 { for cx in 0..<5 {
                let got = opx.chroma(cx * 2, cy * 2)
                var want = (cb: 128, cr: 128)
                if px.cb != nil {
                    if px.chromaStepY == 2 {
                        let c = px.chroma(cx * 2, cy * 2); want = (Int(c.cb), Int(c.cr))
                    } else {
                        let a = px.chroma(cx * 2, cy * 2), b = px.chroma(cx * 2, cy * 2 + 1)
                        want = ((Int(a.cb) + Int(b.cb) + 1) / 2, (Int(a.cr) + Int(b.cr) + 1) / 2)
                    }
                }
                #expect(Int(got.cb) == want.cb && Int(got.cr) == want.cr, "\(source) → \(target) chroma at \(cx),\(cy)")
            } }
        }
    }

    @Test func rgbAndBayerSourcesConvert() throws {
        // Packed RGB re-orders exactly.
        let rgb = noiseFrame(FrameFormat(.rgb24, width: 8, height: 4))
        let conv = try FrameConverter(target: .bgra)
        let out = Frame(capacity: conv.outputFormat(for: rgb.format).maxByteCount, format: rgb.format)
        try conv.convert(rgb, into: out)
        for i in 0..<32 {
            #expect(byte(out, i * 4) == byte(rgb, i * 3 + 2) && byte(out, i * 4 + 1) == byte(rgb, i * 3 + 1) && byte(out, i * 4 + 2) == byte(rgb, i * 3) && byte(out, i * 4 + 3) == 255)
        }
        // RGB and Bayer to YUV go through the engine's own RGB/Bayer converter: the same luma.
        for source in [PixelFormat.rgb24, .bgr24, .bgra, .sbggr8, .srggb8] {
            let f = noiseFrame(FrameFormat(source, width: 8, height: 6))
            let reference = Frame(capacity: RGBBayerConverter().decodedByteCount(for: f.format, scale: 1), format: f.format)
            try RGBBayerConverter().decode(f, scale: 1, into: reference)
            let c = try FrameConverter(target: .grey)
            let g = Frame(capacity: c.outputFormat(for: f.format).maxByteCount, format: f.format)
            try c.convert(f, into: g)
            for y in 0..<6 { for x in 0..<8 { #expect(byte(g, y * 8 + x) == byte(reference, y * reference.format.bytesPerRow + x), "\(source) luma at \(x),\(y)") } }
        }
    }

    @Test(arguments: [0, 90, 180, 270], [false, true])
    func turnsAndMirrorsAsTheConnectionMapsPoints(rotation: Int, mirrored: Bool) throws {
        let w = 8, h = 6
        for (source, target) in [(PixelFormat.yuyv, PixelFormat.bgra), (.nv12, .rgb24), (.i420, .i420), (.yuyv, .nv12), (.grey, .grey), (.uyvy, .bgr24)] {
            let inFormat = FrameFormat(source, width: w, height: h)
            let src = noiseFrame(inFormat, seed: UInt32(rotation + 1))
            let straight = try FrameConverter(target: target)
            let flat = Frame(capacity: straight.outputFormat(for: inFormat).maxByteCount, format: inFormat)
            try straight.convert(src, into: flat)
            let conv = try FrameConverter(target: target, rotation: rotation, mirrored: mirrored)
            let outFormat = conv.outputFormat(for: inFormat)
            #expect(outFormat.width == (rotation % 180 == 0 ? w : h) && outFormat.height == (rotation % 180 == 0 ? h : w))
            let out = Frame(capacity: outFormat.maxByteCount, format: inFormat)
            try conv.convert(src, into: out)
            #expect(out.format == outFormat)
            if target == .bgra || target == .rgb24 || target == .bgr24 {
                let n = target == .bgra ? 4 : 3
                for sy in 0..<h { for sx in 0..<w {
                    let (ux, uy) = userPixel(sx, sy, w: w, h: h, rotation: rotation, mirrored: mirrored)
                    for k in 0..<n { #expect(byte(out, uy * outFormat.bytesPerRow + ux * n + k) == byte(flat, sy * flat.format.bytesPerRow + sx * n + k)) }
                } }
            } else {
                let a = try #require(FramePixels(format: flat.format, data: flat.data, capacity: flat.capacity))
                let b = try #require(FramePixels(format: out.format, data: out.data, capacity: out.capacity))
                for sy in 0..<h { for sx in 0..<w {
                    let (ux, uy) = userPixel(sx, sy, w: w, h: h, rotation: rotation, mirrored: mirrored)
                    #expect(b.y(ux, uy) == a.y(sx, sy), "\(source)→\(target) \(rotation)° mirrored \(mirrored): luma \(sx),\(sy)")
                } }
                if a.cb != nil {
                    // Chroma planes turn as pictures of their own.
                    for sy in 0..<(h / 2) { for sx in 0..<(w / 2) {
                        let (ux, uy) = userPixel(sx, sy, w: w / 2, h: h / 2, rotation: rotation, mirrored: mirrored)
                        #expect(b.chroma(ux * 2, uy * 2) == a.chroma(sx * 2, sy * 2))
                    } }
                }
            }
        }
    }

    @Test func keepsPacked422AtHalfTurnsAndMakesI420AtQuarterTurns() throws {
        let f = FrameFormat(.yuyv, width: 8, height: 4)
        let src = noiseFrame(f)
        let half = try FrameConverter(target: nil, rotation: 180, mirrored: false)
        #expect(half.outputFormat(for: f).pixelFormat == .yuyv)
        let out = Frame(capacity: f.maxByteCount, format: f)
        try half.convert(src, into: out)
        let a = try #require(FramePixels(format: f, data: src.data, capacity: src.capacity))
        let b = try #require(FramePixels(format: out.format, data: out.data, capacity: out.capacity))
        for y in 0..<4 { for x in 0..<8 { #expect(b.y(7 - x, 3 - y) == a.y(x, y)); #expect(b.chroma(7 - x, 3 - y) == a.chroma(x, y)) } }
        let mirror = try FrameConverter(target: nil, rotation: 0, mirrored: true)
        try mirror.convert(src, into: out)
        let m = try #require(FramePixels(format: out.format, data: out.data, capacity: out.capacity))
        for y in 0..<4 { for x in 0..<8 { #expect(m.y(7 - x, y) == a.y(x, y)) } }
        #expect(try FrameConverter(target: nil, rotation: 90).outputFormat(for: f) == FrameFormat(.i420, width: 4, height: 8, bytesPerRow: 4))
    }

    @Test func refusesWhatItCannotDo() {
        #expect(throws: FrameConversionError.unsupportedTarget(.mjpeg)) { try FrameConverter(target: .mjpeg) }
        #expect(throws: FrameConversionError.unsupportedTarget(.yuyv)) { try FrameConverter(target: .yuyv) }
        #expect(throws: FrameConversionError.unsupportedRotation(45)) { try FrameConverter(target: .bgra, rotation: 45) }
        var none = VideoOutputSettings(pixelFormat: .bgra)
        none.bufferCount = 0
        #expect(throws: FrameConversionError.invalidBufferCount(0)) { try VideoDataOutput().setVideoSettings(none) }
        // MJPEG without a decoder, and a decoder that refuses the data.
        let jpeg = noiseFrame(FrameFormat(.mjpeg, width: 16, height: 16))
        let conv = try! FrameConverter(target: .bgra)
        let out = Frame(capacity: conv.outputFormat(for: jpeg.format).maxByteCount, format: jpeg.format)
        #expect(throws: FrameConversionError.noDecoder(.mjpeg)) { try conv.convert(jpeg, into: out) }
        let refusing = try! FrameConverter(target: .bgra, decoders: PickyDecoders())
        #expect { try refusing.convert(jpeg, into: out) } throws: { if case FrameConversionError.corrupt = $0 { return true }; return false }
    }
}

/// "Decodes" MJPEG frames whose first byte is even into a grey picture of that byte; others are
/// corrupt. Stands in for the device's TurboJPEG decoder in core tests.
struct PickyDecoders: PixelDecoderFactory {
    final class Decoder: PixelDecoder {
        let scaleDenominators = [1]
        func decodedByteCount(for format: FrameFormat, scale: Int) -> Int { format.width * format.height }
        func decode(_ source: Frame, scale: Int, into target: Frame) throws {
            let first = source.data.load(as: UInt8.self)
            guard first % 2 == 0 else { throw PixelConversionError.tooSmall }
            let f = FrameFormat(.grey, width: source.format.width, height: source.format.height)
            target.data.initializeMemory(as: UInt8.self, repeating: first, count: f.maxByteCount)
            target.format = f
            target.bytesUsed = f.maxByteCount
        }
    }
    func makeDecoder(for format: FrameFormat) -> (any PixelDecoder)? { format.pixelFormat == .mjpeg ? Decoder() : nil }
}

/// A source of fake MJPEG frames, every third one "corrupt" for `PickyDecoders`, with a driver
/// gap after frame 10 (sequences 11–13 never arrive).
final class GappyJPEGSource: CaptureSource, @unchecked Sendable {
    let info = DeviceInfo(id: "gappy", name: "Gappy", driver: "test", bus: "test",
                          formats: [FormatDescription(pixelFormat: .mjpeg, fourcc: PixelFormat.mjpeg.fourcc, description: "MJPEG", compressed: true, sizes: [.discrete(width: 32, height: 16, intervals: [FrameInterval(fps: 30)])])],
                          controls: [], isLive: false)
    var isLive: Bool { false }
    var controls: (any DeviceControlling)? { nil }
    var activeConfiguration: StreamConfiguration?
    private var next: UInt64 = 0
    private var pool: FramePool?
    let total: UInt64
    init(total: UInt64 = 30) { self.total = total }
    func configure(_ r: StreamRequest) throws -> StreamConfiguration {
        let c = StreamConfiguration(format: FrameFormat(.mjpeg, width: 32, height: 16), interval: FrameInterval(fps: 30), bufferCount: max(r.bufferCount, 8))
        activeConfiguration = c
        return c
    }
    func start() throws { pool = FramePool(format: activeConfiguration!.format, count: activeConfiguration!.bufferCount) }
    func next(timeoutNanoseconds: UInt64) throws -> SourceEvent {
        if next == 11 { next = 14 }
        guard next < total else { return .endOfStream }
        guard let f = pool?.acquire(timeoutNanoseconds: 1_000_000_000) else { return .timeout }
        f.sequence = next
        f.timestamp = Timestamp(nanoseconds: next * 33_333_333, clock: .monotonic)
        f.data.storeBytes(of: UInt8(next % 3 == 0 ? 1 : 2 * (next % 100)), as: UInt8.self)
        f.bytesUsed = 100
        next += 1
        return .frame(f)
    }
    func stop() {}
}

/// Records what a video data output delivers and drops.
final class RecordingDelegate: VideoDataOutputDelegate, @unchecked Sendable {
    let got = LockedBox<[(UInt64, FrameFormat, [UInt8])]>([])
    let dropped = LockedBox<[(UInt64, DropReason)]>([])
    let delayNs: UInt64
    init(delayNs: UInt64 = 0) { self.delayNs = delayNs }
    func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
        let bytes = sampleBuffer.withUnsafeBytes { Array($0) }
        got.withLock { $0.append((sampleBuffer.sequence, sampleBuffer.format, bytes)) }
        if delayNs > 0 { usleep(UInt32(delayNs / 1000)) }
    }
    func videoDataOutput(_ output: VideoDataOutput, didDrop sequence: UInt64, reason: DropReason) {
        dropped.withLock { $0.append((sequence, reason)) }
    }
}

@Suite struct VideoDataOutputSettingsTests {
    @Test func sessionDeliversConvertedTurnedFramesAndTheNativeOnesAlongside() throws {
        let session = CaptureSession()
        let dev = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32,frames=24,format=yuyv"))
        try session.addInput(CaptureDeviceInput(device: dev))
        let converted = VideoDataOutput(name: "bgra", alwaysDiscardsLateVideoFrames: false)
        try converted.setVideoSettings(VideoOutputSettings(pixelFormat: .bgra, rotation: 90))
        let native = VideoDataOutput(name: "native", alwaysDiscardsLateVideoFrames: false)
        let a = RecordingDelegate(), b = RecordingDelegate()
        converted.setDelegate(a, queue: nil)
        native.setDelegate(b, queue: nil)
        try session.addOutput(converted)
        try session.addOutput(native)
        try session.startRunning()
        session.waitUntilFinished()
        let gotA = a.got.withLock { $0 }, gotB = b.got.withLock { $0 }
        #expect(gotA.count == 24 && gotB.count == 24)
        #expect(converted.droppedFrames.total == 0)
        let reference = try FrameConverter(target: .bgra, rotation: 90)
        for (ca, cb) in zip(gotA, gotB) {
            #expect(ca.0 == cb.0)
            #expect(ca.1 == FrameFormat(.bgra, width: cb.1.height, height: cb.1.width))
            #expect(cb.1.pixelFormat == .yuyv)
            let src = Frame(capacity: cb.2.count, format: cb.1)
            cb.2.withUnsafeBytes { src.data.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            src.bytesUsed = cb.2.count
            let want = Frame(capacity: ca.1.maxByteCount, format: ca.1)
            try reference.convert(src, into: want)
            #expect(Array(UnsafeRawBufferPointer(start: want.data, count: want.bytesUsed)) == ca.2)
        }
    }

    /// A delegate slower than a live camera, not discarding late frames: the frames queued for it
    /// are copies, so the camera keeps its buffers and the other outputs their frames (it held
    /// the camera's buffers, and the camera lost frames as out_of_buffers).
    @Test func aSlowDelegateKeepingEveryFrameHoldsNoneOfTheCamerasBuffers() throws {
        let session = CaptureSession()
        // (The session sizes the pattern's pool for its pipeline: about 20 buffers.)
        let dev = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32,frames=60,fps=60,paced=true"))
        try session.addInput(CaptureDeviceInput(device: dev))
        let slow = VideoDataOutput(name: "slow", alwaysDiscardsLateVideoFrames: false)
        let fast = VideoDataOutput(name: "fast", alwaysDiscardsLateVideoFrames: false)
        let s = RecordingDelegate(delayNs: 50_000_000), f = RecordingDelegate()
        let queue = DispatchQueue(label: "slow-delegate")
        slow.setDelegate(s, queue: queue)
        fast.setDelegate(f, queue: nil)
        try session.addOutput(slow)
        try session.addOutput(fast)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        queue.sync {}   // the slow delegate's queue drained
        let stats = try #require(session.statistics)
        #expect(stats.drops[.outOfBuffers] == 0, "\(stats.drops)")
        let handed = try #require(stats.consumers.first { $0.name == "slow" }).consumed
        let got = s.got.withLock { $0 }, reference = f.got.withLock { $0 }
        #expect(handed >= 30)
        // Every frame handed to the output reached its delegate (a loaded machine may drop some at
        // the output's ring before that, counted as ring_full: not what this checks).
        #expect(slow.droppedFrames[.outOfBuffers] == 0 && slow.droppedFrames[.late] == 0 && UInt64(got.count) == handed, "\(slow.droppedFrames)")
        #expect(zip(got, got.dropFirst()).allSatisfy { $0.0 < $1.0 }, "in order")
        let bySequence = Dictionary(reference.map { ($0.0, $0.2) }, uniquingKeysWith: { a, _ in a })
        #expect(got.allSatisfy { bySequence[$0.0] == nil || bySequence[$0.0] == $0.2 }, "the copies are the frames")
        #expect(got.filter { bySequence[$0.0] != nil }.count >= 30)
    }

    /// The same through the async sequence, not discarding: the frames it buffers for a slow
    /// consumer on a live camera are copies, the camera's buffers go back at once.
    @Test func aSlowSequenceKeepingEveryFrameHoldsNoneOfTheCamerasBuffers() async throws {
        let session = CaptureSession()
        let dev = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32,frames=60,fps=60,paced=true"))
        try session.addInput(CaptureDeviceInput(device: dev))
        let slow = VideoDataOutput(name: "slow", alwaysDiscardsLateVideoFrames: false)
        let fast = VideoDataOutput(name: "fast", alwaysDiscardsLateVideoFrames: false)
        let f = RecordingDelegate()
        fast.setDelegate(f, queue: nil)
        try session.addOutput(slow)
        try session.addOutput(fast)
        let stream = slow.frames()
        try session.startRunning()
        var got: [(UInt64, [UInt8])] = []
        var held: [SampleBuffer] = []   // the consumer keeps 30 of them too, as an app's history would
        for await b in stream {
            got.append((b.sequence, b.withUnsafeBytes { Array($0) }))
            if held.count < 30 { held.append(b) }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        session.stopRunning()
        let stats = try #require(session.statistics)
        #expect(stats.drops[.outOfBuffers] == 0, "\(stats.drops)")
        // How many the sequence hands over depends on how often a loaded machine runs the task
        // (it keeps the newest 8): all 60 when the test runs alone, 9 beside 58 other tests.
        #expect(!got.isEmpty && zip(got, got.dropFirst()).allSatisfy { $0.0 < $1.0 })
        #expect(UInt64(got.count) + slow.droppedFrames.total == 60, "every frame handed over or counted (late when the sequence was full)")
        let reference = Dictionary(f.got.withLock { $0 }.map { ($0.0, $0.2) }, uniquingKeysWith: { a, _ in a })
        #expect(got.allSatisfy { reference[$0.0] == nil || reference[$0.0] == $0.1 }, "the copies are the frames")
        #expect(held.count == min(got.count, 30))
    }

    @Test func followsTheConnectionsRotationAndMirroringWhenAsked() throws {
        let session = CaptureSession()
        let dev = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32,frames=5,format=nv12"))
        try session.addInput(CaptureDeviceInput(device: dev))
        let out = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        try out.setVideoSettings(VideoOutputSettings(pixelFormat: .grey, followsConnection: true))
        let d = RecordingDelegate()
        out.setDelegate(d, queue: nil)
        try session.addOutput(out)
        let connection = try #require(session.connections.first { $0.output === out })
        try connection.setVideoRotationAngle(270)
        connection.isVideoMirrored = true
        try session.startRunning()
        session.waitUntilFinished()
        let got = d.got.withLock { $0 }
        #expect(got.count == 5)
        // The session's preset decides the size (pattern sizes are a maximum): turned a quarter.
        let size = try #require(session.streamConfiguration?.format)
        #expect(got.allSatisfy { $0.1 == FrameFormat(.grey, width: size.height, height: size.width) }, "\(got.map { $0.1 })")
    }

    @Test func everyDropReachesTheDelegateWithItsReason() throws {
        // Driver gap (11–13), corrupt JPEGs (every third frame: the output decodes), a stage
        // dropping odd frames: each dropped frame is reported once, with its reason, and the
        // delivered and dropped frames together are every sequence number.
        let src = GappyJPEGSource(total: 30)
        let cfg = try src.configure(StreamRequest(pixelFormat: .mjpeg, width: 32, height: 16, fps: 30, bufferCount: 8))
        let out = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        try out.setVideoSettings(VideoOutputSettings(pixelFormat: .bgra))
        out.setPixelDecoders(PickyDecoders())
        let d = RecordingDelegate()
        out.setDelegate(d, queue: nil)
        let engine = CaptureEngine(source: src, configuration: cfg, stages: [DropEveryOther(options: .init())], consumers: [out])
        try engine.start()
        #expect(engine.waitUntilFinished(timeoutSeconds: 30))
        let delivered = Set(d.got.withLock { $0.map(\.0) })
        let dropped = d.dropped.withLock { $0 }
        var reasons: [UInt64: DropReason] = [:]
        for (s, r) in dropped { #expect(reasons[s] == nil, "sequence \(s) reported twice"); reasons[s] = r }
        for s in UInt64(0)..<30 {
            var want: DropReason? = nil
            if (11...13).contains(s) { want = .driverGap } else if s % 2 == 1 { want = .stage } else if s % 3 == 0 { want = .corrupt }
            if let want { #expect(reasons[s] == want, "sequence \(s): \(String(describing: reasons[s])), expected \(want)") } else { #expect(delivered.contains(s), "sequence \(s) neither delivered nor dropped") }
        }
        let corruptExpected = (0..<30).filter { (s: Int) -> Bool in s % 2 == 0 && s % 3 == 0 && !(11...13).contains(s) }.count
        #expect(out.droppedFrames[.corrupt] == UInt64(corruptExpected))
        // The delivered frames are the decoder's grey picture as BGRA.
        for (s, f, bytes) in d.got.withLock({ $0 }) {
            #expect(f == FrameFormat(.bgra, width: 32, height: 16))
            let v = UInt8(2 * (s % 100))
            #expect(bytes.prefix(4) == [v, v, v, 255])
        }
    }

    final class Hoarder: VideoDataOutputDelegate, @unchecked Sendable {
        let kept = LockedBox<[SampleBuffer]>([])
        let drops = LockedBox<[DropReason]>([])
        let delayMicroseconds: UInt32
        init(delayMicroseconds: UInt32 = 0) { self.delayMicroseconds = delayMicroseconds }
        func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
            kept.withLock { $0.append(sampleBuffer) }
            if delayMicroseconds > 0 { usleep(delayMicroseconds) }
        }
        func videoDataOutput(_ output: VideoDataOutput, didDrop sequence: UInt64, reason: DropReason) { drops.withLock { $0.append(reason) } }
    }

    /// A delegate that keeps every buffer: once the output's pool (3) is held, every further frame
    /// is reported out_of_buffers, and only this output drops. Also when the format asked for is
    /// the stream's own (2 Dec: the engine's frames were handed out then, so a delegate holding
    /// them starved the engine): the buffers still come from the output's pool.
    @Test(arguments: [PixelFormat.rgb24, .i420])
    func heldBuffersMakeTheRestOutOfBuffersAndTheBooksBalance(asked: PixelFormat) throws {
        let src = try PatternSource(deviceString: "pattern:width=64,height=32,frames=60,format=i420")
        let cfg = try src.configure(StreamRequest(pixelFormat: .i420, width: 64, height: 32, fps: 30, bufferCount: 16))
        let out = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        try out.setVideoSettings(VideoOutputSettings(pixelFormat: asked, bufferCount: 3))
        let h = Hoarder()
        out.setDelegate(h, queue: nil)
        let engine = CaptureEngine(source: src, configuration: cfg, stages: [], consumers: [out])
        try engine.start()
        #expect(engine.waitUntilFinished(timeoutSeconds: 30))
        #expect(h.kept.withLock { $0.count } == 3)
        #expect(h.kept.withLock { $0 }.allSatisfy { $0.format.pixelFormat == asked })
        #expect(h.drops.withLock { $0 } == Array(repeating: .outOfBuffers, count: 57))
        #expect(out.droppedFrames[.outOfBuffers] == 57)
        #expect(engine.statistics.drops.total == 0, "the engine dropped \(engine.statistics.drops.total)")
    }

    @Test func framesTheSequenceReplacesAreCountedAsLate() async throws {
        // The async sequence keeps the newest frame its consumer has not taken: the ones it
        // replaced are counted in droppedFrames (2 Dec: only in droppedLateFrames).
        let src = try PatternSource(deviceString: "pattern:width=64,height=32,frames=40,format=yuyv")
        let cfg = try src.configure(StreamRequest(pixelFormat: .yuyv, width: 64, height: 32, fps: 30, bufferCount: 16))
        let out = VideoDataOutput()
        let stream = out.frames()
        let engine = CaptureEngine(source: src, configuration: cfg, stages: [], consumers: [out])
        try engine.start()
        #expect(engine.waitUntilFinished(timeoutSeconds: 30))
        var taken = 0
        for await _ in stream { taken += 1; break }
        #expect(taken == 1)
        #expect(out.droppedLateFrames == 39)
        #expect(out.droppedFrames[.late] == 39)
    }

    @Test func aBusyDelegateGetsLateDropsAndTheBooksBalance() throws {
        // A slow delegate on a queue with late-frame discarding: the frames it cannot take are
        // reported late, and delivered + reported is every frame.
        let src = try PatternSource(deviceString: "pattern:width=64,height=32,frames=60,format=yuyv")
        let cfg = try src.configure(StreamRequest(pixelFormat: .yuyv, width: 64, height: 32, fps: 30, bufferCount: 16))
        let out = VideoDataOutput(alwaysDiscardsLateVideoFrames: true)
        try out.setVideoSettings(VideoOutputSettings(pixelFormat: .bgra))
        let h = Hoarder(delayMicroseconds: 1000)
        let q = DispatchQueue(label: "slow")
        out.setDelegate(h, queue: q)
        let engine = CaptureEngine(source: src, configuration: cfg, stages: [], consumers: [out])
        try engine.start()
        #expect(engine.waitUntilFinished(timeoutSeconds: 30))
        q.sync {}
        let kept = h.kept.withLock { $0.count }, drops = h.drops.withLock { $0 }
        #expect(kept >= 1)
        #expect(kept + drops.count == 60)
        #expect(drops.allSatisfy { $0 == .late })
        #expect(out.droppedFrames.total == UInt64(drops.count))
        #expect(out.deliveredFrames == UInt64(kept))
    }
}

@Suite struct BacklogFramesTests {
    /// An MJPEG frame's decoded picture, copied with it, counts against the budget's memory: the
    /// views are larger than the compressed frames, and the frame count alone let them grow past it.
    @Test func decodedViewsCountAgainstTheMemoryCap() throws {
        let jpeg = FrameFormat(.mjpeg, width: 64, height: 32)
        let picture = FrameFormat(.yuyv, width: 64, height: 32)
        let cap = 3 * jpeg.maxByteCount + 3 * picture.maxByteCount
        let backlog = BacklogFrames(format: jpeg, limit: 100, maximumBytes: cap)
        var kept: [Frame] = []
        for i in 0..<10 {
            let f = Frame(capacity: jpeg.maxByteCount, format: jpeg)
            f.bytesUsed = 500
            f.sequence = UInt64(i)
            let v = Frame(capacity: picture.maxByteCount, format: picture)
            v.retain()
            f.setDecoded(v)
            guard let c = backlog.copy(f) else { break }
            #expect(c.decoded != nil && c.sequence == UInt64(i))
            kept.append(c)
        }
        #expect(kept.count == 3, "three frames with their pictures fit in the cap, not the limit's 100")
        #expect(backlog.bytes <= cap)
        // Given back, they are reused: no more memory.
        for c in kept { c.release() }
        let f = Frame(capacity: jpeg.maxByteCount, format: jpeg)
        f.bytesUsed = 500
        let v = Frame(capacity: picture.maxByteCount, format: picture)
        v.retain()
        f.setDecoded(v)
        let again = try #require(backlog.copy(f))
        #expect(backlog.bytes <= cap && backlog.made == 3)
        again.release()
    }
}

extension VideoDataOutputSettingsTests {
    /// A sequence whose consumer keeps every buffer uses up the output's backlog; a delegate that
    /// keeps up still gets every frame (it lost those frames with the sequence before).
    @Test func anIdleDelegateGetsEveryFrameWhenASequenceUsedUpTheBacklog() async throws {
        let session = CaptureSession()
        // 30 fps: the backlog holds 2 s, 60 frames; the sequence's consumer keeps all it gets.
        let dev = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32,frames=100,fps=30,paced=true"))
        try session.addInput(CaptureDeviceInput(device: dev))
        let out = VideoDataOutput(name: "both", alwaysDiscardsLateVideoFrames: false)
        let d = RecordingDelegate()
        let queue = DispatchQueue(label: "idle-delegate")
        out.setDelegate(d, queue: queue)
        try session.addOutput(out)
        let stream = out.frames()
        try session.startRunning()
        var held: [SampleBuffer] = []
        for await b in stream { held.append(b) }
        session.stopRunning()
        queue.sync {}
        let stats = try #require(session.statistics)
        let handed = try #require(stats.consumers.first { $0.name == "both" }).consumed
        let got = d.got.withLock { $0 }
        #expect(handed >= 90, "\(handed)")
        // The sequence's consumer kept more than the backlog holds (on a loaded machine its task
        // may instead fall behind, and the sequence drop the buffers it had not taken as late).
        #expect(held.count <= 60)
        #expect((held.count == 60 && out.droppedFrames[.outOfBuffers] > 0) || out.droppedFrames[.late] > 0, "\(held.count) held, \(out.droppedFrames)")
        // The delegate is never busy for long here; the frames it was busy for went to it as copies
        // while the backlog had room, or were dropped and reported.
        let reported = d.dropped.withLock { $0 }.filter { $0.1 == .outOfBuffers }.count
        #expect(UInt64(got.count + reported) == handed, "every frame handed to the output reached the delegate or was reported: \(got.count) + \(reported) of \(handed)")
        #expect(got.count >= Int(handed) * 9 / 10, "\(got.count) of \(handed)")
        #expect(zip(got, got.dropFirst()).allSatisfy { $0.0 < $1.0 })
    }
}
