import Foundation
import Testing
import Viewfinder
import ViewfinderSim
import ViewfinderStages
import ViewfinderV4L2
@testable import ViewfinderSinks

/// Keeps a copy of every frame's own bytes (what the camera sent), by sequence, and whether a
/// stage changed its pixels.
final class CameraBytesRecorder: FrameConsumer, @unchecked Sendable {
    let consumerName = "camera-bytes"
    var ringCapacity: Int { 64 }
    private let lock = NSLock()
    private var store: [UInt64: [UInt8]] = [:]
    private var modified: Set<UInt64> = []
    func consume(_ frame: Frame) {
        let b = Array(frame.bytes)
        lock.lock(); store[frame.sequence] = b; if frame.pixelsModified { modified.insert(frame.sequence) }; lock.unlock()
    }
    var bytes: [UInt64: [UInt8]] { lock.lock(); defer { lock.unlock() }; return store }
    var modifiedCount: Int { lock.lock(); defer { lock.unlock() }; return modified.count }
}

/// The MJPEG sim camera through stages into a movie, a raw dump and a byte recorder.
@Suite("MJPEG through the stages into the sinks")
struct MJPEGStagesTests {
    struct Run { var movie: String; var dump: String; var camera: [UInt64: [UInt8]]; var modified: Int; var statistics: EngineStatistics; var dir: String }

    func record(_ stages: String, frames: Int = 40, camera: String = "", ownBalanceOff: Bool = false, name: String = #function) throws -> Run {
        let dir = makeTempDirectory(name)
        let cam = try SimCamera(deviceString: "sim:paced=false,shake=3,seed=3,format=mjpeg,width=320,height=240,frames=\(frames)\(camera)")
        // A camera whose own balance is off shows the light's cast (at its native 5200 K balance).
        if ownBalanceOff { try cam.controls?.set(.whiteBalanceAuto, to: 0); try cam.controls?.set(.whiteBalanceTemperature, to: 5200) }
        let cfg = try cam.configure(StreamRequest(pixelFormat: .mjpeg, width: 320, height: 240, fps: 30, bufferCount: 48))
        let movie = MovieFileOutput()
        let events = RecordingEvents()
        try movie.startRecording(to: dir + "/m.mov", delegate: events)
        let dump = RawDumpOutput(path: dir + "/d.vfdump")
        let rec = CameraBytesRecorder()
        let registry = StageRegistry.viewfinderStages
        let built = try StageSpec.parseList(stages).map { try registry.makeStage($0) }
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: built, consumers: [movie, dump, rec], pixelDecoders: MJPEGPixelDecoder.Factory())
        try engine.start()
        engine.waitUntilFinished()
        #expect(events.waitFinished())
        #expect(events.finished.first?.2 == nil)
        return Run(movie: dir + "/m.mov", dump: dir + "/d.vfdump", camera: rec.bytes, modified: rec.modifiedCount, statistics: engine.statistics, dir: dir)
    }

    /// The movie's video samples as they are stored (ffmpeg copies each packet into a file).
    func samples(_ movie: String, dir: String) throws -> [[UInt8]] {
        let out = dir + "/samples"
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let (rc, _, err) = try run("/usr/bin/ffmpeg", ["-v", "error", "-i", movie, "-map", "0:v", "-c", "copy", "-f", "image2", out + "/%04d.jpg"])
        #expect(rc == 0, "\(err)")
        let names = try FileManager.default.contentsOfDirectory(atPath: out).sorted()
        return try names.map { Array(try Data(contentsOf: URL(fileURLWithPath: out + "/" + $0))) }
    }

    @Test("metering stages only: the movie holds the camera's JPEGs byte for byte")
    func passThrough() throws {
        let r = try record("exposure,focus")
        #expect(r.statistics.delivered == 40 && r.statistics.drops.total == 0)
        #expect(r.statistics.decodeScale == 1) // 320 wide: focus measures on 320 samples
        #expect(r.modified == 0)
        let s = try samples(r.movie, dir: r.dir)
        #expect(s.count == 40)
        for (i, sample) in s.enumerated() { #expect(sample == r.camera[UInt64(i)], "sample \(i) is not the camera's JPEG") }
        try? FileManager.default.removeItem(atPath: r.dir)
    }

    /// A camera without a balance control (software correction): the gains go on the decoded
    /// pixels and the movie carries them (the stage used to measure MJPEG frames only, leaving
    /// the picture as warm as the camera sent it). On the camera's full-size JPEG pictures the
    /// estimate was 3200–4700 K here under a 3000 K light (29 Nov; JPEG smears chroma at the edges
    /// the estimator weighs most): since 3 Dec it measures them area-averaged to the reduced
    /// decode's size, and 10.5 levels of cast leave 4.5 in the movie (7.1 before).
    @Test("white balance in software on an MJPEG camera: the movie is corrected")
    func whiteBalanceCorrectsMJPEG() throws {
        func meanChroma(_ jpeg: [UInt8]) throws -> (cb: Double, cr: Double) {
            let d = try jpeg.withUnsafeBytes { try JPEGDecoder().decodePlanes($0) }
            return (Double(d.u.reduce(0) { $0 + Int($1) }) / Double(d.u.count), Double(d.v.reduce(0) { $0 + Int($1) }) / Double(d.v.count))
        }
        let warm = try record("white_balance:mode=continuous:correction=software", frames: 60, camera: ",colortemp=3000", ownBalanceOff: true)
        let native = try record("null", frames: 60, camera: ",colortemp=5200", ownBalanceOff: true)
        defer { try? FileManager.default.removeItem(atPath: warm.dir); try? FileManager.default.removeItem(atPath: native.dir) }
        #expect(warm.statistics.delivered == 60 && warm.statistics.drops.total == 0)
        #expect(warm.modified >= 55, "\(warm.modified) of 60 frames corrected")
        let s = try samples(warm.movie, dir: warm.dir)
        try #require(s.count == 60)
        // Frames 20-59: the warm light's cast in Cb (camera against the same scene under the
        // camera's own balance), and what is left of it in the movie.
        var cast = 0.0, left = 0.0
        for k in 20..<60 {
            let neutral = try meanChroma(try #require(native.camera[UInt64(k)]))
            cast += neutral.cb - (try meanChroma(try #require(warm.camera[UInt64(k)]))).cb
            left += neutral.cb - (try meanChroma(s[k])).cb
        }
        cast /= 40; left /= 40
        print("MJPEG white balance in software: cast \(cast) levels of Cb, left in the movie \(left)")
        #expect(cast > 8, "the light's cast: \(cast) levels of Cb")
        #expect(left < cast * 0.6, "left in the movie: \(left) of \(cast) levels of Cb")
    }

    @Test("with stabilise: the movie is re-encoded from the warped pixels; the raw dump keeps the camera's bytes")
    func reencodedWithStabilise() throws {
        let r = try record("exposure,focus,stabilise:lookahead=5")
        #expect(r.statistics.delivered == 40 && r.statistics.drops.total == 0)
        #expect(r.statistics.decodeScale == 1)
        #expect(r.modified == 40)
        let s = try samples(r.movie, dir: r.dir)
        #expect(s.count == 40)
        let same = s.enumerated().filter { $0.element == r.camera[UInt64($0.offset)] }.count
        #expect(same == 0, "\(same) samples passed through although the pixels were changed")
        // Every sample is a whole 320x240 JPEG that decodes without a warning. (ffmpeg's null
        // muxer is not used here: it complains about the unpaced sim's irregular timestamps.)
        let decoder = try MJPEGDecoder()
        let out = Frame(capacity: FrameFormat(.yuv422p, width: 320, height: 240).maxByteCount, format: FrameFormat(.grey, width: 1, height: 1))
        for sample in s {
            let h = try sample.withUnsafeBytes { try decoder.header($0) }
            #expect(h.width == 320 && h.height == 240)
            try sample.withUnsafeBytes { try decoder.decode($0, into: out) }
        }
        // The dump stores what the camera sent, flagged as changed downstream.
        let reader = try RawDumpReader(path: r.dump)
        #expect(reader.entries.count == 40)
        let f = Frame(capacity: FrameFormat(.mjpeg, width: 320, height: 240).maxByteCount, format: FrameFormat(.mjpeg, width: 320, height: 240))
        for i in 0..<reader.entries.count {
            try reader.read(i, into: f)
            #expect(Array(f.bytes) == r.camera[f.sequence], "dump frame \(i)")
            #expect(f.pixelsModified)
        }
        try? FileManager.default.removeItem(atPath: r.dir)
    }

    @Test("frames out of an MJPEG camera: y4m and raw carry each frame's decoded planes, in order", arguments: [FramePipeOutput.Format.y4m, .raw])
    func pipeCarriesDecodedPlanes(_ format: FramePipeOutput.Format) throws {
        let dir = makeTempDirectory("mjpeg-pipe-\(format.rawValue)")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let cam = try SimCamera(deviceString: "sim:paced=false,seed=5,format=mjpeg,width=320,height=240,frames=12")
        let cfg = try cam.configure(StreamRequest(pixelFormat: .mjpeg, width: 320, height: 240, fps: 30, bufferCount: 32))
        let path = dir + "/out." + format.rawValue
        let pipe = FramePipeOutput(path: path, format: format)
        let layouts = LockedBox<[String]>([])
        pipe.onRawLayout = { l in layouts.withLock { $0.append(l) } }
        let rec = CameraBytesRecorder()
        // No stage asks for pixels: the pipe alone makes the engine decode each frame, full size.
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: [], consumers: [pipe, rec], options: EngineOptions(frameLimit: 12),
                                   pixelDecoders: MJPEGPixelDecoder.Factory())
        try engine.start()
        engine.waitUntilFinished()
        #expect(engine.runtimeError == nil)
        #expect(pipe.error == nil)
        #expect(pipe.framesWritten == 12)
        #expect(engine.statistics.decodeScale == 1)
        // What each camera JPEG decodes to, by sequence order.
        let decoder = try MJPEGDecoder()
        let want = Frame(capacity: FrameFormat(.yuv422p, width: 320, height: 240).maxByteCount, format: FrameFormat(.grey, width: 1, height: 1))
        let camera = rec.bytes.sorted { $0.key < $1.key }.map(\.value)
        #expect(camera.count == 12)
        let wanted: [[UInt8]] = try camera.map { jpeg in
            try jpeg.withUnsafeBytes { try decoder.decode($0, into: want) }
            return Array(want.bytes)
        }
        if format == .y4m {
            let reader = try Y4MReader(path: path)
            #expect(reader.format.pixelFormat == want.format.pixelFormat && reader.format.width == 320 && reader.format.height == 240)
            let f = Frame(capacity: reader.format.maxByteCount, format: reader.format)
            var i = 0
            while try reader.read(into: f) {
                #expect(Array(f.bytes) == wanted[i], "frame \(i)")
                i += 1
            }
            #expect(i == 12)
        } else {
            #expect(layouts.withLock { $0 } == [FramePipeOutput.rawLayout(of: want.format)])
            let all = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            let n = FramePipeOutput.rawFrameBytes(want.format)
            #expect(all.count == 12 * n)
            for i in 0..<12 where all.count == 12 * n {
                #expect(Array(all[i * n ..< (i + 1) * n]) == wanted[i], "frame \(i)")
            }
        }
    }

    @Test("one camera JPEG, one picture: the engine's decode and export's give the same planes, sample for sample")
    func engineAndExportDecodeAlike() throws {
        // The sim's noisy, detailed frames: the fast IDCT moved up to 4 levels of 11–30 % of their
        // luma samples away from export's (accurate) decode.
        let cam = try SimCamera(deviceString: "sim:paced=false,seed=9,noise=2,format=mjpeg,width=640,height=480,frames=4")
        _ = try cam.configure(StreamRequest(pixelFormat: .mjpeg, width: 640, height: 480, fps: 30, bufferCount: 4))
        try cam.start()
        defer { cam.stop() }
        let engine = try MJPEGDecoder(), export = try JPEGDecoder()
        let planes = Frame(capacity: FrameFormat(.yuv422p, width: 640, height: 480).maxByteCount, format: FrameFormat(.grey, width: 1, height: 1))
        for i in 0..<4 {
            guard case .sample(let jpeg) = try cam.nextSample(timeoutNanoseconds: 5_000_000_000) else { Issue.record("no frame \(i)"); return }
            try engine.decode(jpeg.frame, into: planes)
            let d = try jpeg.withUnsafeBytes { try export.decodePlanes($0) }
            #expect(planes.format.pixelFormat == .yuv422p && d.subsampling == .s422)
            let bytes = Array(planes.bytes), y = 640 * 480, c = 320 * 480
            #expect(bytes.count == y + 2 * c)
            guard bytes.count == y + 2 * c else { return }
            // Counted, not compared as arrays: a failure says how many samples, not 600 000 values.
            let lumaDiffer = (0..<y).count { bytes[$0] != d.y[$0] }
            let chromaDiffer = (0..<c).count { bytes[y + $0] != d.u[$0] || bytes[y + c + $0] != d.v[$0] }
            #expect(lumaDiffer == 0 && chromaDiffer == 0, "frame \(i): \(lumaDiffer) luma and \(chromaDiffer) chroma samples differ")
        }
    }

    @Test("the TurboJPEG view decoder refuses a damaged JPEG (the engine counts it as corrupt)")
    func corruptFrame() throws {
        let views = MJPEGPixelDecoder.Factory().makeDecoder(for: FrameFormat(.mjpeg, width: 64, height: 48))!
        let src = Frame(capacity: 4096, format: FrameFormat(.mjpeg, width: 64, height: 48))
        for i in 0..<64 { src.data.storeBytes(of: UInt8(truncatingIfNeeded: i * 7), toByteOffset: i, as: UInt8.self) }
        src.bytesUsed = 64
        let dst = Frame(capacity: views.decodedByteCount(for: src.format, scale: 1), format: FrameFormat(.grey, width: 1, height: 1))
        #expect(throws: MJPEGError.self) { try views.decode(src, scale: 1, into: dst) }
    }
}
