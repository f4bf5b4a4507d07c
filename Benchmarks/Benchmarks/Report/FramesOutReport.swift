import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ViewfinderKit

/// Frames out to other programs, at 1080p YUYV: a Python reader on the shared-memory ring
/// (python/ viewfinder_frames, zero-copy views) and the y4m/raw pipe into `cat > /dev/null`.
/// Each figure is the median of several runs with the range (min–max).
enum FramesOutReport {
    static let repository = here.deletingLastPathComponent()
    static let python = "/usr/bin/python3"

    struct ReaderResult { var fps: Double; var frames: Int; var missed: Int; var latency: [String: [String: Double]] }

    /// Starts the Python reader on ring `name`; returns the process and its stdout.
    static func startReader(_ name: String, stamped: Bool) throws -> (Process, Pipe) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: python)
        p.arguments = [here.appendingPathComponent("python/shm_reader_bench.py").path, name] + (stamped ? ["stamped"] : [])
        var env = ProcessInfo.processInfo.environment
        env["PYTHONPATH"] = repository.appendingPathComponent("python").path
        p.environment = env
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        return (p, out)
    }

    static func finishReader(_ p: Process, _ out: Pipe) throws -> ReaderResult {
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0, let o = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw SinkError.corruptData("python reader failed (status \(p.terminationStatus)): \(String(decoding: data, as: UTF8.self))")
        }
        return ReaderResult(fps: o["fps"] as? Double ?? 0, frames: o["frames"] as? Int ?? 0, missed: o["missed"] as? Int ?? 0,
                            latency: o["latency_us"] as? [String: [String: Double]] ?? [:])
    }

    /// One run: the pattern source (1080p YUYV) into the ring, a Python reader on the other side.
    /// Returns the reader's result and the writer's frame rate.
    static func shmRun(frames: Int, paced: Bool, fps: Int = 60, width: Int = 1920, height: Int = 1080, onStageThread: Bool = true) throws -> (ReaderResult, Double) {
        let name = "vf-report-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let (proc, out) = try startReader(name, stamped: paced)
        usleep(300_000)   // let Python import NumPy and start waiting for the ring
        let src = try PatternSource(deviceString: "pattern:width=\(width),height=\(height),format=yuyv,frames=\(frames),paced=\(paced),fps=\(fps)")
        let cfg = try src.configure(StreamRequest(pixelFormat: .yuyv, width: width, height: height, fps: Double(fps), bufferCount: 16))
        let shm = SharedMemoryOutput(name: name, slots: 8, onStageThread: onStageThread)
        // Paced runs measure latency: a last stage stamps when each frame leaves the chain.
        let engine = CaptureEngine(source: src, configuration: cfg, stages: paced ? [OutputStampStage(options: NoOptions())] : [], consumers: [shm])
        let t0 = monotonicNanoseconds()
        try engine.start()
        engine.waitUntilFinished()
        let writerFps = Double(shm.framesPublished) / (Double(monotonicNanoseconds() - t0) / 1e9)
        return (try finishReader(proc, out), writerFps)
    }

    /// One run of the pipe: the pattern source into `FramePipeOutput`, read by `cat > /dev/null`.
    static func pipeRun(frames: Int, pixelFormat: PixelFormat, format: FramePipeOutput.Format) throws -> Double {
        let cat = Process()
        cat.executableURL = URL(fileURLWithPath: "/bin/sh")
        cat.arguments = ["-c", "cat > /dev/null"]
        let pipe = Pipe()
        cat.standardInput = pipe
        try cat.run()
        let fd = pipe.fileHandleForWriting.fileDescriptor
        let src = try PatternSource(deviceString: "pattern:width=1920,height=1080,format=\(pixelFormat.rawValue),frames=\(frames)")
        let cfg = try src.configure(StreamRequest(pixelFormat: pixelFormat, width: 1920, height: 1080, fps: 30, bufferCount: 16))
        let out = FramePipeOutput(path: "/dev/fd/\(fd)", format: format)
        let engine = CaptureEngine(source: src, configuration: cfg, stages: [], consumers: [out])
        let t0 = monotonicNanoseconds()
        try engine.start()
        engine.waitUntilFinished()
        let seconds = Double(monotonicNanoseconds() - t0) / 1e9
        try pipe.fileHandleForWriting.close()
        cat.waitUntilExit()
        guard out.framesWritten == UInt64(frames) else { throw SinkError.corruptData("pipe wrote \(out.framesWritten) of \(frames) frames") }
        return Double(frames) / seconds
    }

    static func spread(_ v: [Double], _ fmt: String) -> String {
        let s = v.sorted()
        return String(format: fmt, s[s.count / 2]) + " (" + String(format: fmt, s.first!) + "–" + String(format: fmt, s.last!) + ")"
    }

    static func run(quick: Bool) throws {
        let runs = quick ? 3 : 5
        print("\n== Frames out at 1920x1080 YUYV (median of \(runs) runs, range in brackets)")
        guard FileManager.default.isExecutableFile(atPath: python) else { row("Python reader", "not run", "(\(python) missing)"); return }
        var readerFps: [Double] = [], writerFps: [Double] = [], missed: [Double] = []
        for _ in 0..<runs {
            let (r, w) = try shmRun(frames: quick ? 1000 : 3000, paced: false)
            readerFps.append(r.fps); writerFps.append(w); missed.append(Double(r.missed) / Double(max(1, r.frames + r.missed)) * 100)
        }
        row("shm ring → Python reader, non-live source, no copy", spread(readerFps, "%.0f fps"), "target ≥ 500")
        row("  writer (engine → ring) in the same runs", spread(writerFps, "%.0f fps"), spread(missed, "%.0f %%") + " of frames overwritten before the reader came")
        // Latency with the ring published on the stage thread (the default) and, interleaved run
        // by run, on a consumer thread of its own (the thread hand-off it saves).
        for (w, h) in [(1920, 1080), (640, 480)] {
            var p99c: [[Double]] = [[], []], p99s: [[Double]] = [[], []], p50s: [[Double]] = [[], []], p99p: [[Double]] = [[], []]
            for _ in 0..<runs {
                for (k, onStage) in [true, false].enumerated() {
                    let (r, _) = try shmRun(frames: quick ? 180 : 600, paced: true, fps: 60, width: w, height: h, onStageThread: onStage)
                    p99c[k].append(r.latency["capture"]?["p99"] ?? .nan); p99s[k].append(r.latency["stage"]?["p99"] ?? .nan)
                    p50s[k].append(r.latency["stage"]?["p50"] ?? .nan); p99p[k].append(r.latency["publish"]?["p99"] ?? .nan)
                }
            }
            let size = "\(w)x\(h)"
            row("latency, stage output → Python reader, p99, \(size)", spread(p99s[0], "%.0f µs"), (w == 1920 ? "target ≤ 1000; " : "") + "p50 " + spread(p50s[0], "%.0f µs"))
            row("  of which slot complete → Python reader, p99", spread(p99p[0], "%.0f µs"), "the rest is the copy into the ring")
            row("  capture → Python reader, p99", spread(p99c[0], "%.0f µs"), "60 fps paced source")
            row("  same runs, published on a thread of its own: p99", spread(p99s[1], "%.0f µs"), "p50 " + spread(p50s[1], "%.0f µs") + " (onStageThread: false)")
        }
        for (pf, fmt) in [(PixelFormat.yuyv, FramePipeOutput.Format.y4m), (.i420, .y4m), (.yuyv, .raw)] {
            let fps = try (0..<runs).map { _ in try pipeRun(frames: quick ? 300 : 900, pixelFormat: pf, format: fmt) }
            row("pipe \(fmt.rawValue) from \(pf) into `cat > /dev/null`", spread(fps, "%.0f fps"), fmt == .y4m && pf == .yuyv ? "target ≥ 300 (YUYV → 4:2:2 planar)" : "")
        }
    }
}

/// Stamps, as the last stage, when each frame leaves the stage chain (`stage_output_ns`, CLOCK_MONOTONIC).
final class OutputStampStage: Stage {
    static let name = "output_stamp"
    static let summary = "Stamps the time a frame leaves the chain into its metadata."
    let key = MetadataKey("stage_output_ns")
    init(options: NoOptions) {}
    func process(_ frame: Frame) -> StageVerdict {
        frame.metadata.custom.set(key, Double(monotonicNanoseconds()))
        return .forward
    }
}
