// Side-by-side figures: Viewfinder's measurements next to the peers', measured in the same run.
//
//   cd Benchmarks && swift run -c release viewfinder-report [--quick] [--frames-out | --dump | --record | --formats | --stabilise | --stabilise-motions | --autofocus | --kernels | --stages]
//
// Needs g++ and libboost-dev for the ring reference and gst-launch-1.0 for the movie peer
// (`bash scripts/install-deps.sh --bench`); a peer that is missing is reported as such.
import DequeModule
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import StageTiming
import Synchronization
import ViewfinderKit

if CommandLine.arguments.contains("--help") || CommandLine.arguments.contains("-h") {
    print("""
    viewfinder-report: Viewfinder's measurements next to the peers', measured in the same run.

    USAGE: viewfinder-report [--quick] [SECTION]
      (no section)          the whole report: rings, engine overhead, sim camera, stages, sinks, peers
      --ring                the rings only (the engine's, a mutex baseline, boost's spsc_queue)
      --stages              the stage kernels and stages at 1920x1080 (GREY, YUYV, NV12)
      --frames-out          the pipe and shared-memory outputs
      --dump | --record     the raw dump / the movie against their peers
      --formats             throughput per pixel format
      --stabilise           the stabiliser against vidstab and deshake (sim sequences)
      --stabilise-motions   the stabiliser on real photographs along every motion (long)
      --autofocus           autofocus on real photographs
      --kernels             the C kernels, portable and AVX2
      --profile NAME        a loop for a profiler (stabilise-only-yuyv, stabilise-yuyv, warp-yuyv, …)
      --quick               fewer iterations (figures are less steady)
    See README.md, "Benchmarks", for what each figure means and the commands that produced the published ones.
    """)
    exit(0)
}
let quick = CommandLine.arguments.contains("--quick")
/// `--ring` measures only the rings (the engine's, the mutex baseline, boost's).
let ringOnly = CommandLine.arguments.contains("--ring")
/// `--stages` measures only the stage kernels and stages.
let stagesOnly = CommandLine.arguments.contains("--stages")
let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

func shell(_ cmd: String) -> (Int32, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/bash")
    p.arguments = ["-c", cmd]
    let pipe = Pipe()
    p.standardOutput = pipe
    p.standardError = pipe
    do { try p.run() } catch { return (-1, "\(error)") }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}

func time(_ body: () throws -> Void) rethrows -> Double {
    let t0 = monotonicNanoseconds()
    try body()
    return Double(monotonicNanoseconds() - t0) / 1e9
}

/// One line of the report: the measure, its value and a note in columns (a long value is never cut).
func row(_ what: String, _ value: String, _ note: String = "") {
    func column(_ s: String, _ width: Int) -> String { s.count >= width ? s : s.padding(toLength: width, withPad: " ", startingAt: 0) }
    print(column(what, 58) + " " + column(value, 22) + " " + note)
}

// MARK: Ring

final class MutexDeque: @unchecked Sendable {
    // @unchecked Sendable: the deque is only touched under `mutex`.
    let mutex = Mutex<Deque<Int>>(Deque(minimumCapacity: 1024))
    func push(_ v: Int) -> Bool { mutex.withLock { d in if d.count >= 1024 { return false }; d.append(v); return true } }
    func pop() -> Int? { mutex.withLock { $0.popFirst() } }
}

func ringRate(_ n: Int) -> Double {
    let r = SPSCRing<Int>(capacity: 1024)
    var sum = 0
    let s = time {
        let t = EngineThread(name: "producer") { var i = 0; while i < n { if r.push(i) == nil { i &+= 1 } } }
        var got = 0
        while got < n { if let v = r.pop() { sum &+= v; got &+= 1 } }
        t.join()
    }
    precondition(sum == (n - 1) * n / 2, "ring lost or reordered items")
    return Double(n) / s / 1e6
}

func mutexRate(_ n: Int) -> Double {
    let q = MutexDeque()
    return Double(n) / time {
        let t = EngineThread(name: "producer") { var i = 0; while i < n { if q.push(i) { i &+= 1 } } }
        var got = 0
        while got < n { if q.pop() != nil { got &+= 1 } }
        t.join()
    } / 1e6
}

print("Viewfinder benchmark report — \(Date())")
print("machine: \(ProcessInfo.processInfo.activeProcessorCount) cores\n")
if let i = CommandLine.arguments.firstIndex(of: "--profile"), i + 1 < CommandLine.arguments.count {
    // A loop to run under a sampling profiler: `--profile stabilise-yuyv` (perf record -e cpu-clock).
    let what = CommandLine.arguments[i + 1]
    let fmt: PixelFormat = what.hasSuffix("grey") ? .grey : what.hasSuffix("nv12") ? .nv12 : .yuyv
    if what.hasPrefix("stabilise-only") {
        // The stage alone (look-ahead 15, no copy), nothing else in the profile; under callgrind
        // fewer iterations (VF_PROFILE_ITERATIONS).
        let n = ProcessInfo.processInfo.environment["VF_PROFILE_ITERATIONS"].flatMap { Int($0) } ?? 1000
        // VF_PROFILE_CONSUME=1: each frame the stage hands on is then read whole, as a sink would.
        let consume = ProcessInfo.processInfo.environment["VF_PROFILE_CONSUME"] == "1"
        // VF_PROFILE_PHOTO=file.jpg: two 1920x1080 views of a photograph 3 and 2 px apart, with
        // sensor noise, instead of the synthetic texture (a sky with a few thin lines takes the
        // estimator's dense step, which the texture never does).
        // With VF_PROFILE_MOTION=n as well: the photograph filmed along the motions report's
        // n-th motion (`CameraMotion.all`: hand-held shake, pans, …) at 1920x1080 (its scale 3),
        // frame after frame, the stage timed on the film in order (at most 240 frames filmed; a
        // longer run starts the film again, one jump per 240 frames).
        if let photo = ProcessInfo.processInfo.environment["VF_PROFILE_PHOTO"],
           let m = ProcessInfo.processInfo.environment["VF_PROFILE_MOTION"].flatMap({ Int($0) }) {
            guard fmt == .yuyv, CameraMotion.all.indices.contains(m) else { print("VF_PROFILE_MOTION: YUYV and a motion 0..<\(CameraMotion.all.count)"); exit(1) }
            let name = URL(fileURLWithPath: photo).lastPathComponent
            _ = shell("mkdir -p /tmp/viewfinder-stab-motions")
            guard let picture = SourcePicture(photo: photo, cache: "/tmp/viewfinder-stab-motions/\(name)", scale: 3) else {
                print("\(photo): not decoded (ffmpeg)"); exit(1)
            }
            // The film (240 frames) is kept in /tmp (raw YUYV frames) for the next run of the same
            // photograph and motion: filming takes ~0.1 s a frame.
            // The stage's calls: the look-ahead (15) filled with 17, one untimed, then n timed.
            let count = min(n + 15 + 3, 240), format = FrameFormat(.yuyv, width: 1920, height: 1080)
            let cache = "/tmp/viewfinder-stab-motions/film-\(name)-\(m)-240.yuyv"
            func newFrame(_ t: Int) -> Frame {
                let c = Frame(capacity: format.maxByteCount, format: format)
                c.bytesUsed = format.maxByteCount
                c.sequence = UInt64(t)
                return c
            }
            var film: [Frame] = []
            if let file = fopen(cache, "rb") {
                for t in 0..<count {
                    let c = newFrame(t)
                    guard fread(c.data, 1, format.maxByteCount, file) == format.maxByteCount else { break }
                    film.append(c)
                }
                fclose(file)
            }
            if film.count < count {
                film = []
                let file = fopen(cache + ".part", "wb")
                try filmMotion(picture, CameraMotion.all[m], frames: 240, seed: 1, scale: 3, format: .yuyv) { f in
                    if film.count < count {
                        let c = newFrame(film.count)
                        c.data.copyMemory(from: f.data, byteCount: format.maxByteCount)
                        film.append(c)
                    }
                    if let file { _ = fwrite(f.data, 1, format.maxByteCount, file) }
                }
                if let file, fclose(file) == 0 { rename(cache + ".part", cache) }
            }
            print(StageBenchmarks.stabilise(frames: film, lookahead: 15, spareBuffers: true, iterations: n, consume: consume),
                  "on \(name) filmed along \"\(CameraMotion.all[m].name)\"")
        } else if let photo = ProcessInfo.processInfo.environment["VF_PROFILE_PHOTO"] {
            guard let (a, b) = photoFrames(photo, format: FrameFormat(fmt, width: 1920, height: 1080)) else {
                print("\(photo): not decoded (ffmpeg)"); exit(1)
            }
            print(StageBenchmarks.stabilise(a, b, lookahead: 15, spareBuffers: true, iterations: n, consume: consume), "on \(URL(fileURLWithPath: photo).lastPathComponent)")
        } else {
            print(StageBenchmarks.stabilise(pixelFormat: fmt, iterations: n, consume: consume))
        }
        exit(0)
    }
    for r in StageBenchmarks.run(width: 1920, height: 1080, pixelFormat: fmt, iterations: 400) where r.name.contains(what.hasPrefix("warp") ? "warp, all planes (" : "stabil") { print(r) }
    exit(0)
}
if let i = CommandLine.arguments.firstIndex(of: "--diagnose-stage") {
    let a = CommandLine.arguments
    try diagnoseStage(a[i + 1], frames: Int(a[i + 2])!, shake: Double(a[i + 3])!, lookahead: Int(a[i + 4])!)
    exit(0)
}
if let i = CommandLine.arguments.firstIndex(of: "--diagnose-motion") {
    try diagnoseMotion(CommandLine.arguments[i + 1], motion: Int(CommandLine.arguments[i + 2])!)
    exit(0)
}
if let i = CommandLine.arguments.firstIndex(of: "--diagnose") {
    try diagnoseEstimator(CommandLine.arguments[i + 1])
    exit(0)
}
// One section alone: the first of these flags given runs its section and exits.
let sections: [(flag: String, run: () throws -> Void)] = [
    ("--frames-out", { try FramesOutReport.run(quick: quick) }),
    ("--dump", { try runDumpReport(quick: quick) }),
    ("--record", { try RecordComparison.run(quick: quick) }),
    ("--formats", { try runFormatsReport(quick: quick) }),
    ("--stabilise-motions", { try runStabiliseMotions(quick: quick) }),
    ("--stabilise", { try runStabiliseComparison(quick: quick) }),
    ("--kernels", { try reportKernels(quick: quick) }),
    ("--autofocus", { try AutofocusReport.run(quick: quick) }),
]
if let section = sections.first(where: { CommandLine.arguments.contains($0.flag) }) {
    try section.run()
    exit(0)
}
if stagesOnly {
    for fmt in [PixelFormat.grey, .yuyv, .nv12] {
        print("== Stage kernels and stages at 1920x1080 \(fmt) (ms per frame, median thread CPU time)")
        for r in StageBenchmarks.run(width: 1920, height: 1080, pixelFormat: fmt, iterations: quick ? 20 : 100) { print("  \(r)") }
    }
    exit(0)
}
print("== Ring between two threads (million items/s, best of 5)")
let n = quick ? 20_000_000 : 100_000_000
let ring = (0..<5).map { _ in ringRate(n) }.max()!
let mutex = (0..<3).map { _ in mutexRate(n / 10) }.max()!
row("Viewfinder SPSCRing<Int>", String(format: "%.0f M/s", ring))
row("Mutex<Deque<Int>> baseline", String(format: "%.1f M/s", mutex), String(format: "ring is %.1fx", ring / mutex))
let boostBin = "/tmp/viewfinder-spsc-boost"
let (bc, bout) = shell("g++ -O3 -march=x86-64-v3 -std=c++17 -pthread '\(here.path)/cpp/spsc_boost.cpp' -o \(boostBin) && \(boostBin) \(n) 5")
if bc == 0, let boost = Double(bout.trimmingCharacters(in: .whitespacesAndNewlines)) {
    row("boost::lockfree::spsc_queue<long> (C++ -O3)", String(format: "%.0f M/s", boost), String(format: "ring/boost = %.2f", ring / boost))
} else {
    row("boost::lockfree::spsc_queue", "not run", "(g++/libboost-dev missing: \(bout.prefix(80)))")
}

if ringOnly { exit(0) }

// MARK: Engine overhead

print("\n== Engine overhead: 1080p YUYV, pool + ring hops + 4 null stages + null sink")
func pipeline(frames: Int, copy: Bool) throws -> (Double, Double) {
    let src = try PatternSource(deviceString: "pattern:width=1920,height=1080,format=yuyv,frames=\(frames),copy=\(copy)")
    let cfg = try src.configure(StreamRequest(pixelFormat: .yuyv, width: 1920, height: 1080, fps: 30, bufferCount: 16))
    let stages: [any Stage] = try (0..<4).map { _ in try StageRegistry.builtIn.makeStage(StageSpec(name: "null")) }
    let e = CaptureEngine(source: src, configuration: cfg, stages: stages, consumers: [NullConsumer()])
    let t0 = monotonicNanoseconds()
    var ru0 = rusage(); getrusage(RUSAGE_SELF.rawValue, &ru0)
    try e.start()
    e.waitUntilFinished()
    var ru1 = rusage(); getrusage(RUSAGE_SELF.rawValue, &ru1)
    let wall = Double(monotonicNanoseconds() - t0) / 1e9
    let cpu = (Double(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) + Double(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec)) + Double(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6
    precondition(e.statistics.delivered == UInt64(frames))
    return (wall / Double(frames) * 1e6, cpu / Double(frames) * 1e6)
}
let frames = quick ? 2000 : 20000
let (wallNC, cpuNC) = try (0..<3).map { _ in try pipeline(frames: frames, copy: false) }.min { $0.0 < $1.0 }!
row("pre-rendered frames cycled (no copy), wall per frame", String(format: "%.2f µs", wallNC), String(format: "CPU %.2f µs/frame over all threads", cpuNC))
let (wallC, _) = try pipeline(frames: frames / 4, copy: true)
row("with a 4 MB memcpy per frame (source cost included)", String(format: "%.1f µs", wallC))

// MARK: Sim camera

print("\n== Sim camera, full physical render (shake, defocus, exposure, noise, flicker)")
for fmt in [PixelFormat.yuyv, .nv12] {
    let fps = try SimRender(width: 1920, height: 1080, format: fmt).framesPerSecond(frames: quick ? 60 : 300)
    row("1920x1080 \(fmt), one core", String(format: "%.0f fps", fps), String(format: "%.2f ms/frame", 1000 / fps))
}

// MARK: Stages

print("\n== Stage kernels and stages at 1920x1080 (ms per frame)")
for r in StageBenchmarks.run(width: 1920, height: 1080, pixelFormat: .grey, iterations: quick ? 20 : 100) { print("  \(r)") }
for r in StageBenchmarks.run(width: 1920, height: 1080, pixelFormat: .yuyv, iterations: quick ? 10 : 50) where r.description.contains("stabil") { print("  (YUYV) \(r)") }

// MARK: V4L2 capture thread

print("\n== V4L2 capture thread, DQBUF to ring, fake device")
let v4l2us = V4L2Benchmark.benchmarkFakeCapture(frames: quick ? 2000 : 20000)
row("per frame", String(format: "%.2f µs", v4l2us))
for scale in [1, 2] {
    let ms = try V4L2Benchmark.mjpegDecodeMilliseconds(scaleDenominator: scale, iterations: quick ? 10 : 50)
    row("MJPEG 4:2:2 q85 decode to YUV, 1/\(scale) scale", String(format: "%.2f ms", ms))
}

// MARK: Sinks

let frameCount = quick ? 120 : 300
print("\n== Movie writing 1920x1080, MJPEG .mov, same run as GStreamer (no frame dropped on either side)")
for e in try MovieComparison.run(frames: frameCount, directory: "/dev/shm") { print("  \(e)") }
print("\n== Raw LZ4 dump, noisy 1080p YUYV to /dev/shm")
let d = try DumpBenchmark.run(width: 1920, height: 1080, frames: quick ? 150 : 300, noise: 64, acceleration: 1, directory: "/dev/shm")
row("write", "\(d)")
// Read back on the reading thread alone, and with the chunks decoded side by side (as a replay,
// `dump:FILE`, does by default: one thread per core, at most 4).
let replayThreads = min(4, ProcessInfo.processInfo.activeProcessorCount)
for threads in Set([1, replayThreads]).sorted() {
    let dr = try DumpBenchmark.runRead(width: 1920, height: 1080, frames: quick ? 100 : 300, noise: 64, directory: "/dev/shm", decodeThreads: threads)
    row("read back, \(threads) decoding thread\(threads == 1 ? "" : "s")", "\(dr)")
}
print("\n== Still photo 1920x1080: one TurboJPEG encode q90")
row("encode", String(format: "%.2f ms", try PhotoBenchmark.encodeMilliseconds(iterations: quick ? 10 : 50)))

// MARK: Frames out

try FramesOutReport.run(quick: quick)
