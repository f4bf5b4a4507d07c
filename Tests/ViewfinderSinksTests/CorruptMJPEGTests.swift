import Foundation
import Logging
import Testing
import CTurboJPEG
import Viewfinder
import ViewfinderStages
@testable import ViewfinderV4L2
@testable import ViewfinderSinks
import ViewfinderTestSupport

/// Session and camera logs stay quiet.
let quietSinkLogger: Logger = {
    var l = Logger(label: "test.corrupt-mjpeg")
    l.logLevel = .critical
    return l
}()

/// Camera MJPEG that is truncated, lacks its end marker, or is garbage (issue 15), from a fake
/// kernel through a capture session: a counted `corrupt` drop at every place that decodes it (the
/// engine's decode for stages that need pixels, a video data output converting to a pixel format,
/// the photo output), the books balanced, and the raw dump storing the frames as they came.
@Suite("corrupt camera MJPEG at every decoding sink")
struct CorruptMJPEGTests {
    /// What the camera sends, by the kernel's sequence number (a cycle of six).
    enum Payload: Int, CaseIterable {
        case good, truncated, noEndMarker, garbageAfterStart, good2, garbage
        /// Starts with SOI but does not decode: reaches the consumers, which must count it.
        var reachesConsumers: Bool { self != .garbage }
        var decodes: Bool { self == .good || self == .good2 }
    }

    static let width = 320, height = 240

    /// A 4:2:2 camera JPEG whose picture depends on `seed` (a ramp and a square).
    static func cameraJPEG(seed: Int) -> [UInt8] {
        let h = tjInitCompress()!
        defer { tjDestroy(h) }
        var rgb = [UInt8](repeating: 0, count: width * height * 3)
        for y in 0..<height {
            for x in 0..<width {
                let inSquare = abs(x - (40 + seed * 13) % width) < 20 && abs(y - 120) < 20
                let v = UInt8(inSquare ? 250 : (x * 200 / width + seed) & 0xFF)
                rgb[(y * width + x) * 3] = v; rgb[(y * width + x) * 3 + 1] = v; rgb[(y * width + x) * 3 + 2] = v / 2
            }
        }
        var out: UnsafeMutablePointer<UInt8>? = nil
        var size: UInt = 0
        let r = tjCompress2(h, rgb, Int32(width), 0, Int32(height), Int32(TJPF_RGB.rawValue), &out, &size, Int32(TJSAMP_422.rawValue), 85, 0)
        precondition(r == 0)
        defer { tjFree(out) }
        return Array(UnsafeBufferPointer(start: out, count: Int(size)))
    }

    /// The bytes the camera sends for kernel sequence `seq`.
    static func payload(_ seq: UInt32) -> [UInt8] {
        let good = cameraJPEG(seed: Int(seq % 17))
        switch Payload(rawValue: Int(seq) % Payload.allCases.count)! {
        case .good, .good2: return good
        case .truncated: return Array(good.prefix(good.count * 6 / 10))
        case .noEndMarker:
            precondition(good.suffix(2) == [0xFF, 0xD9])
            return Array(good.dropLast(2))
        case .garbageAfterStart:
            var g: [UInt8] = [0xFF, 0xD8]
            var x: UInt32 = seq &+ 1
            for _ in 0..<6000 { x = x &* 1_103_515_245 &+ 12345; g.append(UInt8(truncatingIfNeeded: x >> 16)) }
            return g
        case .garbage:
            return (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seq)) }
        }
    }

    /// A fake MJPEG camera serving the cycle, frames produced as fast as they are taken, `count` of them.
    func camera(frames count: Int, startAfterMilliseconds delay: UInt32 = 0,
                payload: @escaping @Sendable (UInt32) -> [UInt8] = CorruptMJPEGTests.payload) throws -> (FakeV4L2Kernel, CaptureDevice) {
        let kernel = FakeV4L2Kernel(devices: [.webcam()])
        kernel.setPayload { buf, seq in
            let p = payload(seq)
            precondition(p.count <= buf.count)
            for (i, b) in p.enumerated() { buf[i] = b }
            return p.count
        }
        let cam = try V4L2Camera(path: "/dev/video0", syscalls: kernel, logger: quietSinkLogger)
        _ = try cam.configure(StreamRequest(pixelFormat: .mjpeg, width: Self.width, height: Self.height, bufferCount: 8))
        // Produce `count` frames on a thread of their own, each when a buffer is queued.
        Thread.detachNewThread {
            usleep(delay * 1000)
            var made = 0
            let deadline = Date().addingTimeInterval(20)
            while made < count && Date() < deadline {
                // Paced (2 ms apart) so that the outputs' rings never overflow: any drop is a corrupt one.
                if kernel.statistics().queued > 0 { made += kernel.produce(1); usleep(2000) } else { usleep(200) }
            }
        }
        return (kernel, CaptureDevice(source: cam, pixelDecoders: MJPEGPixelDecoder.Factory()))
    }

    func session(_ device: CaptureDevice, outputs: [any CaptureOutput], stages: String? = nil) throws -> CaptureSession {
        let s = CaptureSession(registry: .viewfinderStages, logger: quietSinkLogger)
        s.beginConfiguration()
        try s.addInput(CaptureDeviceInput(device: device))
        try s.setSessionPreset(.inputPriority)
        for o in outputs { try s.addOutput(o) }
        if let stages { try s.setStages(StageSpec.parseList(stages)) }
        try s.commitConfiguration()
        return s
    }

    /// Waits until the session has counted `n` frames (captured, delivered or dropped).
    func waitForCaptured(_ session: CaptureSession, _ n: UInt64) -> Bool {
        let deadline = Date().addingTimeInterval(20)
        while (session.statistics?.captured ?? 0) < n {
            if Date() > deadline { return false }
            usleep(2000)
        }
        usleep(100_000) // the consumers finish the last frames
        return true
    }

    final class Collector: VideoDataOutputDelegate, @unchecked Sendable {
        // @unchecked Sendable: the lists are only touched with `lock` held.
        let lock = NSLock()
        var delivered: [UInt64] = []
        var dropped: [(UInt64, DropReason)] = []
        func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
            #expect(sampleBuffer.frame.format.pixelFormat == .nv12)
            lock.withLock { delivered.append(sampleBuffer.frame.sequence) }
        }
        func videoDataOutput(_ output: VideoDataOutput, didDrop sequence: UInt64, reason: DropReason) {
            lock.withLock { dropped.append((sequence, reason)) }
        }
    }

    /// No stage needs pixels: every frame that starts like a JPEG reaches the outputs. The video
    /// data output (converting to NV12) drops the undecodable ones as `corrupt`; the raw dump
    /// stores every frame byte for byte, decodable or not; garbage without a JPEG start is a
    /// `corrupt` drop at the camera, before any output.
    @Test func videoDataOutputCountsThemAndTheDumpKeepsThem() throws {
        let cycles = 5, frames = cycles * Payload.allCases.count
        let (_, device) = try camera(frames: frames)
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let dump = RawDumpOutput(path: dir + "/c.vfdump", compression: .none)
        let video = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        try video.setVideoSettings(VideoOutputSettings(pixelFormat: .nv12))
        let collector = Collector()
        video.setDelegate(collector, queue: nil)
        let session = try session(device, outputs: [dump, video])
        try session.startRunning()
        #expect(waitForCaptured(session, UInt64(frames)))
        session.stopRunning()

        let stats = try #require(session.statistics)
        let reaching = (0..<frames).filter { Payload(rawValue: $0 % Payload.allCases.count)!.reachesConsumers }
        let decodable = (0..<frames).filter { Payload(rawValue: $0 % Payload.allCases.count)!.decodes }
        // The camera: garbage without SOI is lost as corrupt before the engine's chain.
        #expect(stats.captured == UInt64(frames))
        #expect(stats.drops[.corrupt] == UInt64(frames - reaching.count))
        #expect(stats.delivered == UInt64(reaching.count))
        #expect(stats.captured == stats.delivered + stats.drops.total)
        // The video data output: every frame the camera sent is delivered or reported dropped
        // with its reason, once — the undecodable ones that reached it as its own corrupt drops,
        // the garbage the camera already lost as the engine's corrupt drops (told to it). Other
        // reasons (a full ring) would be told too; the pacing above rules them out.
        let (got, drops) = collector.lock.withLock { (collector.delivered, collector.dropped) }
        #expect(drops.allSatisfy { $0.1 == .corrupt }, "\(drops)")
        #expect(got == decodable.map(UInt64.init))
        let undecodable = (0..<frames).filter { !decodable.contains($0) }.map(UInt64.init)
        #expect(drops.map(\.0).sorted() == undecodable, "\(drops)")
        #expect(video.droppedFrames[.corrupt] == UInt64(undecodable.count))
        #expect(video.droppedFrames.total == UInt64(undecodable.count))
        #expect(video.deliveredFrames == UInt64(decodable.count))
        #expect(got.count + drops.count == frames)
        // The dump: every frame that reached it, as the camera sent it.
        let dumpStats = try #require(stats.consumers.first { $0.name == dump.consumerName })
        #expect(UInt64(dump.framesWritten) + dumpStats.drops.total == stats.delivered)
        #expect(dumpStats.drops.total == 0)
        let reader = try RawDumpReader(path: dir + "/c.vfdump")
        #expect(reader.frameCount == dump.framesWritten)
        let frame = Frame(capacity: max(reader.maxRawLength, 1), format: FrameFormat(.mjpeg, width: Self.width, height: Self.height))
        var kinds = Set<Payload>()
        var last: UInt64?
        for i in 0..<reader.frameCount {
            try reader.read(i, into: frame)
            let seq = frame.sequence
            #expect(last.map { seq > $0 } ?? true)
            last = seq
            let kind = Payload(rawValue: Int(seq) % Payload.allCases.count)!
            kinds.insert(kind)
            #expect(frame.format.pixelFormat == .mjpeg)
            #expect(Array(frame.bytes) == CorruptMJPEGTests.payload(UInt32(seq)), "dump frame \(i) (sequence \(seq), \(kind)) is not what the camera sent")
        }
        #expect(kinds == Set(Payload.allCases.filter(\.reachesConsumers)))
        // Exported to a movie, the damaged JPEGs are left out and counted (1 Dec sweep: they went
        // in, and ffmpeg then failed on them), as in a y4m export.
        let kept = (0..<reader.frameCount).filter { i in
            (try? reader.read(i, into: frame)).map { Payload(rawValue: Int(frame.sequence) % Payload.allCases.count)!.decodes } ?? false
        }.count
        let m = try DumpConversion.exportMovie(dump: dir + "/c.vfdump", to: dir + "/c.mov")
        #expect(m.frames == kept && m.skippedFrames == reader.frameCount - kept, "\(m)")
        let y = try DumpConversion.exportY4M(dump: dir + "/c.vfdump", to: dir + "/c.y4m")
        #expect(y.frames == kept && y.skippedFrames == m.skippedFrames, "\(y)")
        // (The fake camera's frames are 2 ms apart at a nominal 30 fps: ffmpeg's null muxer then
        // complains of equal timestamps. What counts here is the decoder's own word.)
        let errors = try ffmpegDecodeErrors(dir + "/c.mov").split(separator: "\n").filter { $0.contains("[mjpeg") }
        #expect(errors.isEmpty, "\(errors)")
    }

    /// A stage that needs pixels: the engine decodes for it and drops every undecodable frame as
    /// `corrupt` before the stages; only decodable frames reach the outputs.
    @Test func stagesNeedingPixelsCountThemAtTheEngine() throws {
        let cycles = 5, frames = cycles * Payload.allCases.count
        let (_, device) = try camera(frames: frames)
        let video = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        try video.setVideoSettings(VideoOutputSettings(pixelFormat: .nv12))
        let collector = Collector()
        video.setDelegate(collector, queue: nil)
        let session = try session(device, outputs: [video], stages: "focus")
        try session.startRunning()
        #expect(waitForCaptured(session, UInt64(frames)))
        session.stopRunning()
        let stats = try #require(session.statistics)
        let decodable = (0..<frames).filter { Payload(rawValue: $0 % Payload.allCases.count)!.decodes }
        #expect(stats.captured == UInt64(frames))
        #expect(stats.drops[.corrupt] == UInt64(frames - decodable.count), "\(stats.drops.byName)")
        #expect(stats.delivered == UInt64(decodable.count))
        #expect(stats.captured == stats.delivered + stats.drops.total)
        // The output is told of every frame the engine dropped, with its reason.
        let (got, drops) = collector.lock.withLock { (collector.delivered, collector.dropped) }
        #expect(got == decodable.map(UInt64.init))
        #expect(drops.allSatisfy { $0.1 == .corrupt }, "\(drops)")
        #expect(drops.map(\.0).sorted() == (0..<frames).filter { !decodable.contains($0) }.map(UInt64.init))
        #expect(video.droppedFrames[.corrupt] == UInt64(frames - decodable.count))
    }

    /// The photo output passes the camera's JPEG through: a damaged one is skipped as a counted
    /// `corrupt` drop and the photo comes from the next good frame (a broken still is never stored).
    @Test func photoOutputSkipsThemAndCountsThem() throws {
        let firstGood: UInt32 = 8
        // Frames 0-7 cycle through the damaged kinds; from 8 on the camera is healthy.
        let (_, device) = try camera(frames: 40, startAfterMilliseconds: 100) { seq in
            if seq >= firstGood { return CorruptMJPEGTests.payload(0) }
            let damaged: [Payload] = [.truncated, .noEndMarker, .garbageAfterStart]
            return CorruptMJPEGTests.payload(UInt32(damaged[Int(seq) % 3].rawValue))
        }
        let photo = PhotoOutput()
        let session = try session(device, outputs: [photo])
        try session.startRunning()
        defer { session.stopRunning() }
        let photos = try photo.capturePhotos(settings: PhotoSettings(), timeoutSeconds: 15)
        #expect(photos.count == 1)
        if let p = photos.first {
            #expect(p.sequence >= UInt64(firstGood), "a photo was taken from damaged frame \(p.sequence)")
            let dec = try JPEGDecoder()
            #expect(p.fileDataRepresentation().withUnsafeBytes { dec.decodesCompletely($0) })
        }
        // The output saw at least the first damaged frame after the request (it keeps only the
        // newest, so it may not see all eight); every one it saw is counted, nothing else.
        #expect(photo.droppedFrames[.corrupt] >= 1)
        #expect(photo.droppedFrames[.corrupt] <= UInt64(firstGood))
        #expect(photo.droppedFrames.total == photo.droppedFrames[.corrupt])
    }

    /// The checker itself: each damaged kind fails, the good frame passes.
    @Test func theJPEGCheckerFailsEveryDamagedKind() throws {
        let dec = try JPEGDecoder()
        for kind in Payload.allCases {
            let bytes = CorruptMJPEGTests.payload(UInt32(kind.rawValue))
            #expect(bytes.withUnsafeBytes { dec.decodesCompletely($0) } == kind.decodes, "\(kind)")
        }
    }

    /// The video data output's converter, alone: each damaged kind throws `corrupt`, and good
    /// frames after them still convert (a failed decode leaves nothing behind).
    @Test func theConverterRecoversAfterEachDamagedFrame() throws {
        let conv = try FrameConverter(target: .nv12, decoders: MJPEGPixelDecoder.Factory())
        let src = Frame(capacity: 1 << 16, format: FrameFormat(.mjpeg, width: Self.width, height: Self.height))
        let out = Frame(capacity: conv.outputFormat(for: src.format).maxByteCount, format: conv.outputFormat(for: src.format))
        for seq in UInt32(0)..<12 {
            let bytes = CorruptMJPEGTests.payload(seq)
            bytes.withUnsafeBytes { src.data.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            src.bytesUsed = bytes.count
            src.sequence = UInt64(seq)
            let kind = Payload(rawValue: Int(seq) % Payload.allCases.count)!
            do {
                try conv.convert(src, into: out)
                #expect(kind.decodes, "\(kind) frame \(seq) converted")
            } catch {
                #expect(!kind.decodes, "\(kind) frame \(seq): \(error)")
            }
        }
    }
}
