// Stages on every camera format (`viewfinder-report --formats`): what the decoded view costs
// on MJPEG next to the same chain on YUYV, a live MJPEG pipeline into a movie, and the typed
// plane views against raw pointer arithmetic.
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ViewfinderKit
import StageTiming

/// Median and spread (min–max) of several runs.
struct Spread: CustomStringConvertible {
    let values: [Double]
    var median: Double { let s = values.sorted(); return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2 }
    var description: String { String(format: "%.3f (%.3f–%.3f)", median, values.min() ?? 0, values.max() ?? 0) }
}

/// Stage-thread time per frame (decoded view + stages), ms, of `stages` on the unpaced sim camera
/// in `format`: the capture thread renders on the other core.
func chainCost(_ format: PixelFormat, width: Int, height: Int, stages: String, frames: Int) throws -> (total: Double, decode: Double, scale: Int) {
    let dev = try CaptureDevice.open("sim:paced=false,frames=\(frames),seed=4,format=\(format.rawValue),width=\(width),height=\(height)", directory: .standard)
    let cfg = try dev.source.configure(StreamRequest(pixelFormat: format, width: width, height: height, fps: 30, bufferCount: 16))
    let built = try StageSpec.parseList(stages).map { try StageRegistry.builtIn.makeStage($0) }
    let e = CaptureEngine(source: dev.source, configuration: cfg, stages: built, consumers: [NullConsumer()], pixelDecoders: dev.pixelDecoders)
    try e.start()
    e.waitUntilFinished()
    let s = e.statistics
    precondition(s.delivered == UInt64(frames), "frames lost in a non-live run")
    let decode = s.decodeMeanMicroseconds / 1000
    return (decode + s.stageMeanMicroseconds.reduce(0, +) / 1000, decode, s.decodeScale)
}

final class MovieDone: MovieRecordingDelegate, @unchecked Sendable {
    let lock = ConditionLock()
    var frames = 0, finished = false, failure: String?
    func movieOutput(_ output: MovieFileOutput, didStartRecordingTo path: String) {}
    func movieOutput(_ output: MovieFileOutput, didFinishRecordingTo path: String, summary: MovieRecordingSummary, error: MovieRecordingError?) {
        lock.withLock { frames = summary.frames; finished = true; failure = error.map { "\($0)" }; lock.broadcast() }
    }
}

/// A live (paced 30 fps) MJPEG sim run through `stages` into a movie: drops by reason.
func liveMovie(width: Int, height: Int, stages: String, frames: Int) throws -> (captured: UInt64, dropped: [String: UInt64], movieFrames: Int, moviePath: String) {
    let dev = try CaptureDevice.open("sim:paced=true,fps=30,shake=3,seed=4,format=mjpeg,width=\(width),height=\(height)", directory: .standard)
    let built = try StageSpec.parseList(stages).map { try StageRegistry.builtIn.makeStage($0) }
    let movie = MovieFileOutput()
    let path = NSTemporaryDirectory() + "vf-formats-\(width)x\(height).mov"
    let done = MovieDone()
    try movie.startRecording(to: path, overwrite: true, delegate: done)
    var o = EngineOptions(frameLimit: UInt64(frames))
    o.stageRingCapacity = 8
    let needed = CaptureEngine.buffersNeeded(stages: built, consumers: [movie], options: o)
    let cfg = try dev.source.configure(StreamRequest(pixelFormat: .mjpeg, width: width, height: height, fps: 30, bufferCount: needed))
    let e = CaptureEngine(source: dev.source, configuration: cfg, stages: built, consumers: [movie], options: o, pixelDecoders: dev.pixelDecoders)
    try e.start()
    e.waitUntilFinished()
    done.lock.withLock { while !done.finished { done.lock.wait() } }
    var drops = e.statistics.drops.byName
    for (k, v) in e.statistics.consumers[0].drops.byName { drops["movie." + k, default: 0] += v }
    return (e.statistics.captured, drops, done.frames, path)
}

/// The example stage's kernel (invert luma, sum it) written both ways, at 1080p YUYV and NV12:
/// raw pointers and stride arithmetic as the example had it, and the bounds-checked views.
func negativeKernels(_ pf: PixelFormat, runs: Int) -> (raw: Spread, views: Spread) {
    let fmt = FrameFormat(pf, width: 1920, height: 1080)
    let f = Frame(capacity: fmt.maxByteCount, format: fmt)
    for i in 0..<fmt.maxByteCount { f.data.storeBytes(of: UInt8(truncatingIfNeeded: i &* 31), toByteOffset: i, as: UInt8.self) }
    let k = 200
    var sink = 0
    func raw() {
        let l = fmt.lumaLayout!
        var sum = 0
        for y in 0..<fmt.height {
            let row = (f.data + l.offset + y * l.bytesPerRow).assumingMemoryBound(to: UInt8.self)
            var x = 0
            while x < fmt.width {
                let v = Int(row[x &* l.pixelStride])
                sum &+= v
                row[x &* l.pixelStride] = UInt8(truncatingIfNeeded: (v &* (256 &- k) &+ (255 &- v) &* k) >> 8)
                x &+= 1
            }
        }
        sink &+= sum
    }
    func views() {
        guard let px = f.mutablePixels() else { return }
        var sum = 0
        for y in 0..<px.height {
            let row = px.luma.row(y)
            for x in 0..<row.count {
                let v = Int(row[x])
                sum &+= v
                row[x] = UInt8(truncatingIfNeeded: (v &* (256 &- k) &+ (255 &- v) &* k) >> 8)
            }
        }
        sink &+= sum
    }
    func measure(_ body: () -> Void) -> Double {
        var t: [Double] = []
        for _ in 0..<15 {
            let t0 = StageBenchmarks.threadCPUNanoseconds()
            body()
            t.append(Double(StageBenchmarks.threadCPUNanoseconds() &- t0) / 1e6)
        }
        return Spread(values: t).median
    }
    var r: [Double] = [], v: [Double] = []
    for _ in 0..<runs { r.append(measure(raw)); v.append(measure(views)) }
    if sink == 42 { print("") }
    return (Spread(values: r), Spread(values: v))
}

func runFormatsReport(quick: Bool) throws {
    let runs = quick ? 3 : 5
    let frames = quick ? 60 : 150
    print("== Exposure + focus on MJPEG vs YUYV (stage-thread ms per frame: decoded view + stages; median of \(runs) runs of \(frames) frames, min–max)")
    for (w, h) in [(1280, 720), (1920, 1080), (3840, 2160)] {
        var yuyv: [Double] = [], mjpeg: [Double] = [], decode: [Double] = [], extra: [Double] = []
        var scale = 0
        for _ in 0..<runs {
            let a = try chainCost(.yuyv, width: w, height: h, stages: "exposure,focus", frames: frames)
            let b = try chainCost(.mjpeg, width: w, height: h, stages: "exposure,focus", frames: frames)
            yuyv.append(a.total); mjpeg.append(b.total); decode.append(b.decode); extra.append(b.total - a.total); scale = b.scale
        }
        row("\(w)x\(h) YUYV exposure+focus", "\(Spread(values: yuyv)) ms")
        row("\(w)x\(h) MJPEG exposure+focus (1/\(scale) view)", "\(Spread(values: mjpeg)) ms", "decode \(Spread(values: decode)) ms")
        row("\(w)x\(h) MJPEG minus YUYV", "\(Spread(values: extra)) ms", w == 1920 ? "target <= 1 ms" : "")
    }
    print("\n== Live MJPEG 30 fps (sim camera) through exposure+focus+stabilise into a movie, 2 cores (\(runs) runs of \(frames) frames)")
    for (w, h) in [(1280, 720), (1920, 1080), (3840, 2160)] {
        var dropped: [Double] = [], details: [String] = []
        for _ in 0..<runs {
            let r = try liveMovie(width: w, height: h, stages: "exposure:mode=continuous,focus,stabilise", frames: frames)
            let total = r.dropped.values.reduce(0, +)
            dropped.append(Double(total))
            details.append(total == 0 ? "0" : r.dropped.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
            try? FileManager.default.removeItem(atPath: r.moviePath)
        }
        row("\(w)x\(h) MJPEG live → movie: frames dropped", "\(Spread(values: dropped))", "per run: " + details.joined(separator: "; ") + (w == 1920 ? " (target: no drops)" : ""))
    }
    print("\n== The example stage's kernel at 1920x1080 (ms per frame, median thread CPU of 15, median of \(runs) runs, min–max)")
    for pf in [PixelFormat.yuyv, .nv12] {
        let r = negativeKernels(pf, runs: runs)
        row("negative, raw pointers + strides (\(pf))", "\(r.raw) ms")
        row("negative, bounds-checked PlaneView rows (\(pf))", "\(r.views) ms", String(format: "views/raw = %.2f", r.views.median / r.raw.median))
    }
}
