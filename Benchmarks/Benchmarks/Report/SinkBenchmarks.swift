import Foundation
import ViewfinderKit
#if canImport(Glibc)
import Glibc
#endif

/// Camera-like test frames: a smooth scene (gradients and a few edges) with sensor noise, the way
/// the benchmarks feed the sinks. Filled once, reused round-robin.
public enum BenchmarkFrames {
    /// `count` distinct frames of `width`x`height` from a pool, held by sample buffers (they go
    /// back to the pool with the last reference).
    public static func make(width: Int, height: Int, count: Int = 8, noise: Int = 8, pixelFormat: PixelFormat = .yuyv) -> (FramePool, [SampleBuffer]) {
        let format = FrameFormat(pixelFormat, width: width, height: height)
        let pool = FramePool(format: format, count: count)
        var frames: [SampleBuffer] = []
        for i in 0..<count {
            let buffer = pool.lease()!.share()
            fill(buffer.frame, index: i, noise: noise)
            frames.append(buffer)
        }
        return (pool, frames)
    }

    /// Fills a packed 4:2:2 (or any) frame: luma gradient + a moving bar + noise; chroma gradients.
    public static func fill(_ f: Frame, index: Int, noise: Int) {
        let fmt = f.format
        var rng = UInt64(0x9E37_79B9_7F4A_7C15) &* UInt64(index &+ 1) | 1
        let p = f.data.assumingMemoryBound(to: UInt8.self)
        let n = max(1, noise)
        if fmt.pixelFormat == .yuyv || fmt.pixelFormat == .uyvy {
            let lo = fmt.pixelFormat == .yuyv ? 0 : 1
            for y in 0..<fmt.height {
                let row = p + y &* fmt.bytesPerRow
                for x in 0..<fmt.width {
                    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17
                    let bar = abs(x - (index * 37) % fmt.width) < fmt.width / 20 ? 60 : 0
                    let base = 30 + (x &* 160) / fmt.width + (y &* 40) / fmt.height + bar
                    let l = base + Int(rng % UInt64(n)) - n / 2
                    row[2 &* x &+ lo] = UInt8(clamping: l)
                    row[2 &* x &+ 1 &- lo] = UInt8(clamping: x & 1 == 0 ? 100 + (y &* 50) / fmt.height : 150 - (x &* 40) / fmt.width)
                }
            }
        } else {
            for i in 0..<f.bytesUsed {
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17
                p[i] = UInt8(truncatingIfNeeded: (i % max(fmt.width, 1)) &* 160 / max(fmt.width, 1) &+ 30 &+ Int(rng % UInt64(n)))
            }
        }
    }
}

/// Movie writing speed: 1080p YUYV → TurboJPEG on `threads` workers → fragmented MOV, with the
/// movie output's own thread driving it as the engine's consumer thread would.
public enum MovieWriterBenchmark {
    public struct Result: Sendable, CustomStringConvertible {
        public var frames: Int
        public var framesInFile: Int
        public var seconds: Double
        public var bytes: UInt64
        /// Process CPU time spent (all threads).
        public var cpuSeconds: Double
        public var fps: Double { Double(frames) / seconds }
        public var description: String {
            "\(frames) frames in \(String(format: "%.3f", seconds)) s = \(String(format: "%.1f", fps)) fps (CPU \(String(format: "%.2f", cpuSeconds * 1000 / Double(frames))) ms/frame), \(framesInFile) in the file, \(bytes / 1024) KiB"
        }
    }

    /// Records `frames` frames of `width`x`height` to a movie in `directory` and returns the speed.
    /// Every frame is written (the output applies back-pressure; nothing is dropped).
    public static func run(width: Int = 1920, height: Int = 1080, frames: Int = 300, threads: Int = 2, quality: Int = 85, noise: Int = 8, pixelFormat: PixelFormat = .yuyv, subsampling: ChromaSubsampling? = nil, directory: String = "/tmp") throws -> Result {
        let (_, source) = BenchmarkFrames.make(width: width, height: height, noise: noise, pixelFormat: pixelFormat)
        var settings = MovieOutputSettings()
        settings.encoderThreads = threads
        settings.quality = quality
        settings.subsampling = subsampling
        let output = MovieFileOutput(settings: settings)
        let path = directory + "/vf-moviebench-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).mov"
        defer { unlink(path) }
        let done = MovieRecordingResult()
        try output.start(configuration: StreamConfiguration(format: source[0].frame.format, interval: FrameInterval(fps: 30), bufferCount: 8))
        try output.startRecording(to: path, delegate: done)
        let c0 = processCPUSeconds()
        let t0 = monotonicNanoseconds()
        for i in 0..<frames {
            let f = source[i % source.count].frame
            f.sequence = UInt64(i)
            f.timestamp = Timestamp(nanoseconds: 1_000_000_000 &+ UInt64(i) &* 33_333_333)
            output.consume(f)
        }
        output.finish(error: nil)
        let seconds = Double(monotonicNanoseconds() - t0) / 1e9
        let cpu = processCPUSeconds() - c0
        if let e = done.error { throw e }
        return Result(frames: frames, framesInFile: done.summary?.frames ?? 0, seconds: seconds, bytes: done.summary?.bytes ?? 0, cpuSeconds: cpu)
    }
}

/// Raw dump speed: noisy 1080p YUYV (incompressible, the worst case for the disk) through LZ4 fast
/// mode and XXH64 into a file.
public enum DumpBenchmark {
    public struct Result: Sendable, CustomStringConvertible {
        public var frames: Int
        public var seconds: Double
        public var rawBytes: UInt64
        public var fileBytes: UInt64
        public var cpuSeconds: Double = 0
        public var fps: Double { Double(frames) / seconds }
        public var description: String {
            "\(frames) frames in \(String(format: "%.3f", seconds)) s = \(String(format: "%.1f", fps)) fps (CPU \(String(format: "%.2f", cpuSeconds * 1000 / Double(frames))) ms/frame), \(String(format: "%.0f", Double(rawBytes) / seconds / 1e6)) MB/s raw, ratio \(String(format: "%.2f", Double(rawBytes) / Double(max(fileBytes, 1))))"
        }
    }

    public static func run(width: Int = 1920, height: Int = 1080, frames: Int = 300, noise: Int = 64, acceleration: Int = 1, preallocate: Bool = true, directory: String = "/dev/shm") throws -> Result {
        let (_, source) = BenchmarkFrames.make(width: width, height: height, noise: noise)
        let path = directory + "/vf-dumpbench-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).vfdump"
        defer { unlink(path) }
        let writer = try RawDumpWriter(path: path, format: source[0].frame.format, interval: FrameInterval(fps: 30), acceleration: acceleration, preallocate: preallocate)
        let c0 = processCPUSeconds()
        let t0 = monotonicNanoseconds()
        for i in 0..<frames {
            let f = source[i % source.count].frame
            f.sequence = UInt64(i)
            f.timestamp = Timestamp(nanoseconds: UInt64(i) &* 33_333_333)
            try writer.append(f)
        }
        try writer.close()
        let seconds = Double(monotonicNanoseconds() - t0) / 1e9
        return Result(frames: frames, seconds: seconds, rawBytes: writer.rawBytes, fileBytes: writer.bytesWritten, cpuSeconds: processCPUSeconds() - c0)
    }

    /// Reading it back (checksums verified, chunks decoded on `decodeThreads`) into one frame.
    public static func runRead(width: Int = 1920, height: Int = 1080, frames: Int = 300, noise: Int = 64, directory: String = "/dev/shm",
                               decodeThreads: Int = 1) throws -> Result {
        let (_, source) = BenchmarkFrames.make(width: width, height: height, noise: noise)
        let path = directory + "/vf-dumpbench-read-\(getpid()).vfdump"
        defer { unlink(path) }
        let writer = try RawDumpWriter(path: path, format: source[0].frame.format, overwrite: true)
        for i in 0..<frames { try writer.append(source[i % source.count].frame) }
        try writer.close()
        let reader = try RawDumpReader(path: path, decodeThreads: decodeThreads)
        let frame = Frame(capacity: reader.format.maxByteCount, format: reader.format)
        let c0 = processCPUSeconds()
        let t0 = monotonicNanoseconds()
        for i in 0..<reader.frameCount { try reader.read(i, into: frame) }
        let seconds = Double(monotonicNanoseconds() - t0) / 1e9
        return Result(frames: frames, seconds: seconds, rawBytes: writer.rawBytes, fileBytes: writer.bytesWritten, cpuSeconds: processCPUSeconds() - c0)
    }
}

/// Photo encoding speed (the TurboJPEG encode of one still).
public enum PhotoBenchmark {
    public static func encodeMilliseconds(width: Int = 1920, height: Int = 1080, quality: Int = 90, iterations: Int = 50) throws -> Double {
        let (_, source) = BenchmarkFrames.make(width: width, height: height, count: 1)
        let encoder = try JPEGEncoder()
        var total = 0
        let t0 = monotonicNanoseconds()
        for _ in 0..<iterations { total &+= try encoder.encode(source[0].frame, quality: quality).count }
        withExtendedLifetime(encoder) {}
        return Double(monotonicNanoseconds() - t0) / 1e6 / Double(iterations)
    }
}

/// CPU time (user + system) of finished child processes, seconds.
public func childrenCPUSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_CHILDREN.rawValue, &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}

/// Process CPU time (user + system), seconds.
public func processCPUSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}

/// The movie benchmark side by side with GStreamer's `videotestsrc ! jpegenc ! qtmux ! filesink`
/// (single-threaded, and with a `queue` splitting it over two threads), in the same run.
public enum MovieComparison {
    public struct Entry: Sendable, CustomStringConvertible {
        public var name: String
        public var frames: Int
        public var seconds: Double
        /// CPU time (user + system) of the run, all threads.
        public var cpuSeconds: Double
        public var fps: Double { Double(frames) / seconds }
        public var description: String {
            "\(name): \(frames) frames in \(String(format: "%.3f", seconds)) s = \(String(format: "%.1f", fps)) fps, CPU \(String(format: "%.2f", cpuSeconds * 1000 / Double(max(frames, 1)))) ms/frame"
        }
    }

    /// Runs one GStreamer pipeline (nil when gst-launch-1.0 is not installed or fails).
    public static func gstreamer(_ pipeline: String, frames: Int, name: String) -> Entry? {
        let gst = "/usr/bin/gst-launch-1.0"
        guard FileManager.default.isExecutableFile(atPath: gst) else { return nil }
        let out = "/tmp/vf-gstbench-\(getpid()).mov"
        defer { unlink(out) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: gst)
        p.arguments = ["-q"] + pipeline.replacingOccurrences(of: "NUM", with: String(frames)).replacingOccurrences(of: "OUT", with: out).split(separator: " ").map(String.init)
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        let c0 = childrenCPUSeconds()
        let t0 = monotonicNanoseconds()
        guard (try? p.run()) != nil else { return nil }
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { return nil }
        return Entry(name: name, frames: frames, seconds: Double(monotonicNanoseconds() - t0) / 1e9, cpuSeconds: childrenCPUSeconds() - c0)
    }

    public static let pipelines: [(String, String)] = [
        ("gstreamer jpegenc ! qtmux", "videotestsrc num-buffers=NUM ! video/x-raw,width=1920,height=1080 ! jpegenc ! qtmux ! filesink location=OUT"),
        ("gstreamer queue ! jpegenc ! qtmux", "videotestsrc num-buffers=NUM ! video/x-raw,width=1920,height=1080 ! queue ! jpegenc ! qtmux ! filesink location=OUT"),
        ("gstreamer YUY2 queue ! jpegenc ! qtmux", "videotestsrc num-buffers=NUM ! video/x-raw,format=YUY2,width=1920,height=1080 ! queue ! jpegenc ! qtmux ! filesink location=OUT"),
        ("gstreamer I420 queue ! jpegenc ! qtmux", "videotestsrc num-buffers=NUM ! video/x-raw,format=I420,width=1920,height=1080 ! queue ! jpegenc ! qtmux ! filesink location=OUT"),
    ]

    /// GStreamer's pipelines, then Viewfinder's movie output with 1 and 2 encoder threads.
    /// `noise` is the sensor noise of Viewfinder's frames (8: camera-like; 0: a clean synthetic
    /// picture closer to GStreamer's test pattern, which compresses far better than camera frames).
    public static func run(frames: Int = 300, noise: Int = 8, directory: String = "/tmp") throws -> [Entry] {
        var out: [Entry] = []
        for (name, p) in pipelines { if let e = gstreamer(p, frames: frames, name: name) { out.append(e) } }
        for pf in [PixelFormat.yuyv, .i420] {
            for t in [1, 2] {
                let r = try MovieWriterBenchmark.run(frames: frames, threads: t, noise: noise, pixelFormat: pf, directory: directory)
                out.append(Entry(name: "viewfinder movie output \(pf), \(t) encoder thread\(t > 1 ? "s" : ""), noise \(noise)", frames: r.framesInFile, seconds: r.seconds, cpuSeconds: r.cpuSeconds))
            }
        }
        return out
    }
}

/// Keeps what a movie output reports when its recording finishes (for the report's movie runs).
final class MovieRecordingResult: MovieRecordingDelegate, @unchecked Sendable {
    // @unchecked Sendable: written once on the output's thread before the run ends, read after.
    var summary: MovieRecordingSummary?
    var error: MovieRecordingError?
    func movieOutput(_ output: MovieFileOutput, didFinishRecordingTo path: String, summary: MovieRecordingSummary, error: MovieRecordingError?) {
        self.summary = summary; self.error = error
    }
}
