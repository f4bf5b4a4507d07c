// Issue 12's comparison (`viewfinder-report --record`): recording at the encoder's speed.
//
// Input: frames of the sim camera filming a photograph with sensor noise (`noise=0.5`), held in
// memory, written once as raw YUY2 (GStreamer's input) and as a dump stored as it is (Viewfinder's
// input: the same bytes, read with one copy per frame as GStreamer's filesrc does). Then, runs
// interleaved, medians of `runs` with min–max:
//   - GStreamer: filesrc ! rawvideoparse format=yuy2 ! queue ! jpegenc quality=85 ! qtmux ! filesink
//   - Viewfinder: the dump replayed unpaced (`dump:FILE,paced=false`) into MovieFileOutput (q85,
//     4:2:2, two encoder threads): the path of `viewfinder record --device dump:FILE,paced=false`
//   - TurboJPEG's bare 4:2:2 q85 encode of the same frames from planes split beforehand, on one
//     thread (CPU per frame) and on two (the 2-thread ceiling in fps)
//   - the raw dump of the frames (in memory) to tmpfs with each `RawDumpCompression`, fps and ratio
// at 1080p and 4K. Process CPU time covers every thread (the replay, the encoders, the writer).
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ViewfinderKit

enum RecordComparison {
    /// Writes `frames` as raw bytes (GStreamer's input) and as an uncompressed dump.
    static func writeInputs(_ frames: [Frame], yuv: String, dump: String) throws {
        unlink(yuv); unlink(dump)
        let fd = open(yuv, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { let e = errno; throw SinkError.io(path: yuv, operation: "open", errno: e, message: String(cString: strerror(e))) }
        defer { close(fd) }
        let writer = try RawDumpWriter(path: dump, format: frames[0].format, interval: FrameInterval(fps: 30), compression: .none)
        for (i, f) in frames.enumerated() {
            var done = 0
            while done < f.bytesUsed {
                let n = write(fd, f.data + done, f.bytesUsed - done)
                guard n > 0 else { let e = errno; throw SinkError.io(path: yuv, operation: "write", errno: e, message: String(cString: strerror(e))) }
                done += n
            }
            f.sequence = UInt64(i)
            f.timestamp = Timestamp(nanoseconds: 1_000_000_000 + UInt64(i) * 33_333_333)
            try writer.append(f)
        }
        try writer.close()
    }

    struct Run { var fps: Double; var cpuMs: Double; var bytes: UInt64 }

    /// GStreamer's pipeline over the raw file; nil when gst-launch-1.0 is missing or fails.
    static func gstreamer(yuv: String, width: Int, height: Int, frames: Int, out: String) -> Run? {
        let gst = "/usr/bin/gst-launch-1.0"
        guard FileManager.default.isExecutableFile(atPath: gst) else { return nil }
        unlink(out)
        defer { unlink(out) }
        let args = ["-q", "filesrc", "location=\(yuv)", "!", "rawvideoparse", "format=yuy2", "width=\(width)", "height=\(height)", "framerate=30/1",
                    "!", "queue", "!", "jpegenc", "quality=85", "!", "qtmux", "!", "filesink", "location=\(out)"]
        let p = Process()
        p.executableURL = URL(fileURLWithPath: gst)
        p.arguments = args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        let c0 = childrenCPUSeconds()
        let t0 = monotonicNanoseconds()
        do { try p.run() } catch { return nil }
        p.waitUntilExit()
        let s = Double(monotonicNanoseconds() - t0) / 1e9
        guard p.terminationStatus == 0 else { return nil }
        let size = ((try? FileManager.default.attributesOfItem(atPath: out))?[.size] as? UInt64) ?? 0
        return Run(fps: Double(frames) / s, cpuMs: (childrenCPUSeconds() - c0) * 1000 / Double(frames), bytes: size)
    }

    /// The dump replayed unpaced into a movie, as `viewfinder record --device dump:FILE,paced=false`.
    static func viewfinder(dump: String, frames: Int, out: String) throws -> Run {
        unlink(out)
        defer { unlink(out) }
        let source = try DumpSource(device: "dump:\(dump),paced=false")
        let cfg = try source.configure(StreamRequest(pixelFormat: .yuyv, width: source.recordedConfiguration().format.width, height: source.recordedConfiguration().format.height))
        var settings = MovieOutputSettings()
        settings.quality = 85
        settings.encoderThreads = 2
        let movie = MovieFileOutput(settings: settings)
        let done = MovieRecordingResult()
        try movie.startRecording(to: out, delegate: done)
        var options = EngineOptions()
        options.stallTimeoutSeconds = 30
        let engine = CaptureEngine(source: source, configuration: cfg, stages: [], consumers: [movie], options: options)
        let c0 = processCPUSeconds()
        let t0 = monotonicNanoseconds()
        try engine.start()
        engine.waitUntilFinished()
        let s = Double(monotonicNanoseconds() - t0) / 1e9
        let cpu = processCPUSeconds() - c0
        if let e = done.error { throw e }
        guard let summary = done.summary, summary.frames == frames else {
            throw SinkError.corruptData("the movie holds \(done.summary?.frames ?? 0) of \(frames) frames")
        }
        return Run(fps: Double(frames) / s, cpuMs: cpu * 1000 / Double(frames), bytes: summary.bytes)
    }

    /// TurboJPEG's own encode of the frames from 4:2:2 planes (split before the clock starts):
    /// CPU per frame on one thread, fps on `threads` threads.
    static func bareEncode(_ planes: [[UInt8]], width: Int, height: Int, threads: Int) throws -> Run {
        let fmt = FrameFormat(.yuv422p, width: width, height: height)
        final class Shared: @unchecked Sendable {
            // @unchecked Sendable: each thread writes only its own slot, read after join.
            var failures: [Int]
            init(_ n: Int) { failures = Array(repeating: 0, count: n) }
        }
        let shared = Shared(threads)
        let c0 = processCPUSeconds()
        let t0 = monotonicNanoseconds()
        var workers: [Thread] = []
        let group = DispatchGroup()
        for t in 0..<threads {
            group.enter()
            let th = Thread {
                defer { group.leave() }
                guard let enc = try? JPEGEncoder() else { shared.failures[t] += 1; return }
                var i = t
                while i < planes.count {
                    let ok = planes[i].withUnsafeBytes { b in (try? enc.encode(b.baseAddress!, byteCount: b.count, format: fmt, quality: 85, subsampling: .s422)) != nil }
                    if !ok { shared.failures[t] += 1 }
                    i += threads
                }
            }
            workers.append(th)
            th.start()
        }
        group.wait()
        let s = Double(monotonicNanoseconds() - t0) / 1e9
        let cpu = processCPUSeconds() - c0
        guard shared.failures.allSatisfy({ $0 == 0 }) else { throw SinkError.corruptData("TurboJPEG failed on \(shared.failures.reduce(0, +)) frames") }
        return Run(fps: Double(planes.count) / s, cpuMs: cpu * 1000 / Double(planes.count), bytes: 0)
    }

    static func run(quick: Bool) throws {
        let runs = quick ? 3 : 5
        guard let photo = fetchPhotos()?.first else {
            print("== Recording (issue 12): no photograph could be fetched; skipped")
            return
        }
        let dir = "/dev/shm"
        print("== Recording at the encoder's speed: photograph + sensor noise 0.5, YUYV, q85 4:2:2, interleaved runs, medians of \(runs) (min–max)")
        print("   input: sim:scene=\((photo as NSString).lastPathComponent),noise=0.5,seed=3,shake=2; GStreamer reads it as raw YUY2, Viewfinder as an uncompressed dump (same bytes, one copy per frame), both from \(dir)")
        for (w, h, n) in [(1920, 1080, quick ? 150 : 300), (3840, 2160, quick ? 40 : 80)] {
            let frames = try filmFrames("sim:scene=\(photo),noise=0.5,seed=3,shake=2", format: .yuyv, width: w, height: h, count: n)
            let tag = "\(getpid())-\(w)"
            let yuv = "\(dir)/vf-record-\(tag).yuv", dump = "\(dir)/vf-record-\(tag).vfdump"
            defer { unlink(yuv); unlink(dump) }
            try writeInputs(frames, yuv: yuv, dump: dump)
            // Planes for the bare encode, split before any clock starts.
            var planes: [[UInt8]] = []
            for f in frames.prefix(quick ? 30 : 60) {
                var p = [UInt8](repeating: 0, count: w * h * 2)
                p.withUnsafeMutableBufferPointer { b in
                    let y = b.baseAddress!, u = y + w * h, v = u + w / 2 * h
                    YUVSplit.packed422(f.data.assumingMemoryBound(to: UInt8.self), bytesPerRow: f.format.bytesPerRow, width: w, height: h, order: .yuyv, y: y, u: u, v: v)
                }
                planes.append(p)
            }
            var gst: [Run] = [], vf: [Run] = [], bare1: [Run] = [], bare2: [Run] = []
            var dumps: [RawDumpCompression: [(fps: Double, cpuMs: Double, ratio: Double)]] = [:]
            for _ in 0..<runs {
                if let g = gstreamer(yuv: yuv, width: w, height: h, frames: n, out: "\(dir)/vf-record-\(tag)-gst.mov") { gst.append(g) }
                vf.append(try viewfinder(dump: dump, frames: n, out: "\(dir)/vf-record-\(tag).mov"))
                bare1.append(try bareEncode(planes, width: w, height: h, threads: 1))
                bare2.append(try bareEncode(planes, width: w, height: h, threads: 2))
                for c in RawDumpCompression.allCases {
                    let r = try dumpRun(frames, total: n, compression: c)
                    dumps[c, default: []].append((r.fps, r.cpuMs, r.ratio))
                }
            }
            let vfFps = Spread(values: vf.map(\.fps)), vfCpu = Spread(values: vf.map(\.cpuMs))
            let bareCpu = Spread(values: bare1.map(\.cpuMs)), bareFps = Spread(values: bare2.map(\.fps))
            print("  \(w)x\(h), \(n) frames")
            if gst.isEmpty {
                row("    GStreamer queue ! jpegenc ! qtmux", "not run", "gst-launch-1.0 missing (scripts/install-deps.sh --bench)")
            } else {
                let g = Spread(values: gst.map(\.fps))
                row("    GStreamer queue ! jpegenc ! qtmux", "\(g) fps", "CPU \(Spread(values: gst.map(\.cpuMs))) ms/frame, \(gst[0].bytes / 1024) KiB")
                row("    Viewfinder record (dump replay)", "\(vfFps) fps",
                    String(format: "CPU %@ ms/frame, %llu KiB; %.2fx GStreamer (target ≥ 1.5x)", vfCpu.description, vf[0].bytes / 1024, vfFps.median / g.median))
            }
            row("    TurboJPEG bare encode, 1 thread", "\(Spread(values: bare1.map(\.fps))) fps", "CPU \(bareCpu) ms/frame")
            row("    TurboJPEG bare encode, 2 threads", "\(bareFps) fps",
                String(format: "Viewfinder's CPU per frame %.2fx the bare encode (target ≤ 1.25x), its fps %.0f %% of the 2-thread ceiling", vfCpu.median / bareCpu.median, 100 * vfFps.median / bareFps.median))
            for c in RawDumpCompression.allCases {
                let d = dumps[c] ?? []
                row("    dump to tmpfs, compression \(c)", "\(Spread(values: d.map(\.fps))) fps",
                    String(format: "CPU %@ ms/frame, ratio %.2f", Spread(values: d.map(\.cpuMs)).description, d.last?.ratio ?? 0)
                    + (w == 1920 && c == .auto ? " (target ≥ 300 fps)" : ""))
            }
        }
    }
}
