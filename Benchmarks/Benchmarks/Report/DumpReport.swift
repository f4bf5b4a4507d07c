// The raw dump on real pictures (`viewfinder-report --dump`): frames of the sim camera filming a
// photograph with sensor noise, held in memory, appended by `RawDumpWriter` to tmpfs; beside them
// the same camera's clean procedural scene (noise 0), at 1080p and 4K YUYV.
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ViewfinderKit

/// `count` frames of `device` (a paced=false sim string), copied into frames the caller owns.
func filmFrames(_ device: String, format: PixelFormat, width: Int, height: Int, count: Int) throws -> [Frame] {
    let sim = try SimCamera(deviceString: device + ",paced=false,frames=\(count),width=\(width),height=\(height),format=\(format.rawValue)")
    let cfg = try sim.configure(StreamRequest(pixelFormat: format, width: width, height: height, fps: 30, bufferCount: 4))
    try sim.start()
    defer { sim.stop() }
    var frames: [Frame] = []
    loop: while frames.count < count {
        switch try sim.nextSample(timeoutNanoseconds: 5_000_000_000) {
        case .sample(let s):
            let f = s.frame
            let copy = Frame(capacity: cfg.format.maxByteCount, format: f.format)
            copy.data.copyMemory(from: f.data, byteCount: f.bytesUsed)
            copy.bytesUsed = f.bytesUsed
            copy.sequence = f.sequence
            copy.timestamp = f.timestamp
            frames.append(copy)
        case .endOfStream: break loop
        case .timeout, .lost: continue
        }
    }
    return frames
}

/// Appends `frames` (cycled, numbered 0, 1, …) until `total` are written, then closes the dump.
func appendCycled(_ frames: [Frame], total: Int, to writer: RawDumpWriter) throws {
    for i in 0..<total {
        let f = frames[i % frames.count]
        f.sequence = UInt64(i)
        try writer.append(f)
    }
    try writer.close()
}

/// Appends `frames` (cycled) `total` times to a new dump in /dev/shm: fps, CPU per frame, ratio and
/// how many frames the probe stored as they are.
func dumpRun(_ frames: [Frame], total: Int, acceleration: Int = 1, compression: RawDumpCompression = .auto) throws -> (fps: Double, cpuMs: Double, ratio: Double, stored: Int) {
    let path = "/dev/shm/vf-dumpreport-\(getpid()).vfdump"
    unlink(path)
    defer { unlink(path) }
    let writer = try RawDumpWriter(path: path, format: frames[0].format, interval: FrameInterval(fps: 30), acceleration: acceleration, compression: compression)
    let c0 = processCPUSeconds()
    let t0 = monotonicNanoseconds()
    try appendCycled(frames, total: total, to: writer)
    let seconds = Double(monotonicNanoseconds() - t0) / 1e9
    return (Double(total) / seconds, (processCPUSeconds() - c0) * 1000 / Double(total),
            Double(writer.rawBytes) / Double(max(writer.bytesWritten, 1)), writer.framesStoredByProbe)
}

/// `frames` (cycled, `total`) written once to an `auto` dump in /dev/shm, then read back whole
/// `runs` times on each of `threadCounts` decoding threads in turn (checksums verified, chunks
/// decoded, planes interleaved: an unpaced replay's own work per frame): fps per thread count.
func dumpReadRuns(_ frames: [Frame], total: Int, runs: Int, threadCounts: [Int]) throws -> [Int: [Double]] {
    let path = "/dev/shm/vf-dumpreport-read-\(getpid()).vfdump"
    unlink(path)
    defer { unlink(path) }
    try appendCycled(frames, total: total, to: RawDumpWriter(path: path, format: frames[0].format, interval: FrameInterval(fps: 30), compression: .auto))
    let readers = try threadCounts.map { try RawDumpReader(path: path, decodeThreads: $0) }
    let frame = Frame(capacity: frames[0].format.maxByteCount, format: frames[0].format)
    var fps: [Int: [Double]] = [:]
    for _ in 0..<runs {
        for (t, reader) in zip(threadCounts, readers) {
            let t0 = monotonicNanoseconds()
            for i in 0..<reader.frameCount { try reader.read(i, into: frame) }
            fps[t, default: []].append(Double(reader.frameCount) / (Double(monotonicNanoseconds() - t0) / 1e9))
        }
    }
    return fps
}

/// `frames` recorded as they are to a dump in /dev/shm with timestamps `1/fps` apart: what a live
/// replay (`dump:FILE,paced=true`) delivers at `fps` with little cost of its own (one read and
/// checksum per frame, no rendering). Returns its path.
func recordReplaySource(_ frames: [Frame], fps: Int) throws -> String {
    let path = "/dev/shm/vf-dumpreport-source-\(getpid())-\(fps).vfdump"
    unlink(path)
    let writer = try RawDumpWriter(path: path, format: frames[0].format, interval: FrameInterval(fps: Double(fps)), compression: .none)
    for (i, f) in frames.enumerated() {
        f.sequence = UInt64(i)
        f.timestamp = Timestamp(nanoseconds: 1_000_000_000 + UInt64(i) * 1_000_000_000 / UInt64(fps), clock: .monotonic)
        try writer.append(f)
    }
    try writer.close()
    return path
}

/// A live source (the replay of `source`, paced, looped to `total` frames) through the engine into
/// a `RawDumpOutput` on /dev/shm: frames delivered and written, drops by reason (the source's and
/// the dump's), ratio, frames stored raw to keep up, CPU per frame delivered (the whole process:
/// the replay's read and checksum included). `compression` nil: no dump, a consumer that does
/// nothing (what the replay alone costs).
func liveDumpRun(source: String, frameCount: Int, total: Int, compression: RawDumpCompression?) throws
    -> (delivered: Int, written: Int, drops: [String: UInt64], ratio: Double, rawForBacklog: Int, cpuMs: Double) {
    let path = "/dev/shm/vf-dumpreport-live-\(getpid()).vfdump"
    unlink(path)
    defer { unlink(path) }
    let replay = try DumpSource(device: "dump:\(source),paced=true,loop=\((total + frameCount - 1) / frameCount)")
    let dump = RawDumpOutput(path: path, compression: compression ?? RawDumpCompression.none)
    let consumers: [any FrameConsumer] = compression == nil ? [NullConsumer()] : [dump]
    let f = replay.recordedConfiguration().format
    let buffers = CaptureEngine.buffersNeeded(stages: [], consumers: consumers, options: EngineOptions())
    let cfg = try replay.configure(StreamRequest(pixelFormat: f.pixelFormat, width: f.width, height: f.height, fps: 30, bufferCount: buffers))
    let engine = CaptureEngine(source: replay, configuration: cfg, stages: [], consumers: consumers, options: EngineOptions(frameLimit: UInt64(total)))
    let c0 = processCPUSeconds()
    try engine.start()
    engine.waitUntilFinished()
    let cpu = processCPUSeconds() - c0
    let st = engine.statistics
    var drops = st.drops.byName
    for (k, v) in st.consumers[0].drops.byName { drops["dump " + k, default: 0] += v }
    if let e = dump.error { throw e }
    return (Int(st.delivered), compression == nil ? Int(st.delivered) : dump.framesWritten, drops, Double(dump.rawBytesWritten) / Double(max(dump.bytesWritten, 1)), dump.framesStoredRawForBacklog,
            cpu * 1000 / Double(max(st.delivered, 1)))
}

/// The live rows: the noisy photograph's 1080p frames replayed live at fixed rates into `auto`
/// (and, at the first rate, `none` and the replay alone into a consumer that does nothing, for
/// reference), medians of `runs` with min–max.
func runLiveDumpRows(_ frames: [Frame], label: String, runs: Int, total: Int, rates: [Int]) throws {
    for fps in rates {
        let source = try recordReplaySource(frames, fps: fps)
        defer { unlink(source) }
        // (`RawDumpCompression.none` spelled out: a bare `.none` here is `Optional.none`.)
        let modes: [RawDumpCompression?] = fps == rates[0] ? [RawDumpCompression.auto, RawDumpCompression.none, nil] : [RawDumpCompression.auto]
        var results: [RawDumpCompression?: [(delivered: Int, written: Int, drops: [String: UInt64], ratio: Double, rawForBacklog: Int, cpuMs: Double)]] = [:]
        for _ in 0..<runs {
            for c in modes { results[c, default: []].append(try liveDumpRun(source: source, frameCount: frames.count, total: total, compression: c)) }
        }
        for c in modes {
            let r = results[c] ?? []
            let dropped = r.map { Double($0.drops.values.reduce(0, +)) }
            var reasons: [String: UInt64] = [:]
            for x in r { for (k, v) in x.drops { reasons[k, default: 0] += v } }
            let why = reasons.isEmpty ? "" : " (all runs: " + reasons.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")"
            row("1920x1080 \(label), live \(fps) fps, \(c.map { "\($0)" } ?? "replay alone, no dump")", "\(Spread(values: r.map { Double($0.written) })) \(c == nil ? "consumed" : "written")",
                String(format: "of %@ delivered (of %d), dropped %@%@, ratio %@, stored raw to keep up %@, CPU %@ ms/frame",
                       Spread(values: r.map { Double($0.delivered) }).description, total, Spread(values: dropped).description, why,
                       Spread(values: r.map(\.ratio)).description, Spread(values: r.map { Double($0.rawForBacklog) }).description,
                       Spread(values: r.map(\.cpuMs)).description))
        }
    }
}

func runDumpReport(quick: Bool) throws {
    let runs = quick ? 3 : 5
    // Live rates: `VF_DUMP_LIVE_RATES=300,400` to measure others.
    // `VF_DUMP_LIVE_ONLY=1`: only the live rows (1080p photograph).
    let liveOnly = ProcessInfo.processInfo.environment["VF_DUMP_LIVE_ONLY"] == "1"
    let liveRates = (ProcessInfo.processInfo.environment["VF_DUMP_LIVE_RATES"] ?? "300,330,360,400,450").split(separator: ",").compactMap { Int($0) }.filter { $0 > 0 }
    let photos = fetchPhotos() ?? []
    let photo = photos.first
    print("== Raw dump to tmpfs, YUYV, frames held in memory (medians of \(runs) runs, min–max)")
    if photo == nil { print("  (no photograph: the real-picture rows are skipped)") }
    print("   (auto, lz4 and none interleaved on the same frames; auto: packed 4:2:2 split into Y, U, V planes band by band and coded as delta bit-planes (dump version 4) on \(min(4, ProcessInfo.processInfo.activeProcessorCount)) threads; bands the code cannot shrink are stored as they are)")
    for (w, h) in liveOnly ? [(1920, 1080)] : [(1920, 1080), (3840, 2160)] {
        let n = w > 2000 ? 8 : 24
        let total = quick ? (w > 2000 ? 60 : 150) : (w > 2000 ? 120 : 300)
        var inputs: [(String, String)] = [("clean procedural scene (noise 0)", "sim:noise=0,seed=3")]
        for p in photos.prefix(2).reversed() {
            let name = (p as NSString).lastPathComponent.components(separatedBy: "_by_").first ?? p
            inputs.insert(("photograph \(name) + sensor noise 0.5", "sim:scene=\(p),noise=0.5,seed=3,shake=2"), at: 0)
        }
        for (label, device) in inputs where !liveOnly || label == inputs[0].0 {
            let frames = try filmFrames(device, format: .yuyv, width: w, height: h, count: n)
            // The modes interleaved, run by run, on the same frames.
            var fps: [RawDumpCompression: [Double]] = [:], cpu: [RawDumpCompression: [Double]] = [:]
            var ratio: [RawDumpCompression: Double] = [:], stored: [RawDumpCompression: Int] = [:]
            for _ in 0..<(liveOnly ? 0 : runs) {
                for c in RawDumpCompression.allCases {
                    let r = try dumpRun(frames, total: total, compression: c)
                    fps[c, default: []].append(r.fps); cpu[c, default: []].append(r.cpuMs); ratio[c] = r.ratio; stored[c] = r.stored
                }
            }
            for c in RawDumpCompression.allCases where !liveOnly {
                row("\(w)x\(h) \(label), \(c)", "\(Spread(values: fps[c] ?? [])) fps",
                    String(format: "CPU %@ ms/frame, ratio %.2f, %d of %d frames stored as they are", Spread(values: cpu[c] ?? []).description, ratio[c] ?? 0, stored[c] ?? 0, total)
                    + (w == 1920 && label.hasPrefix("photo") && c == .auto ? " (target ≥ 300 fps)" : ""))
            }
            if !liveOnly {
                // The same `auto` dump read back: the decode alone and side by side (a replay's
                // default: one decoding thread per core, at most 4), interleaved run by run.
                let counts = Set([1, min(4, ProcessInfo.processInfo.activeProcessorCount)]).sorted()
                let read = try dumpReadRuns(frames, total: total, runs: runs, threadCounts: counts)
                for t in counts {
                    row("\(w)x\(h) \(label), auto, read back on \(t) thread\(t == 1 ? "" : "s")", "\(Spread(values: read[t] ?? [])) fps")
                }
            }
            if w == 1920 && label.hasPrefix("photo") && label == inputs[0].0 {
                // Live (issue 12): the same frames from a paced replay through the engine into the
                // dump output, which stores frames raw while it is behind (adaptive auto).
                try runLiveDumpRows(frames, label: label, runs: runs, total: quick ? 600 : 1200, rates: liveRates)
            }
        }
    }
}
