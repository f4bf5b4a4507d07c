import Foundation
import Viewfinder
import Testing
@testable import ViewfinderSinks

/// A fresh empty directory under /tmp for one test.
func makeTempDirectory(_ name: String = #function) -> String {
    let clean = name.filter { $0.isLetter || $0.isNumber }
    let dir = NSTemporaryDirectory() + "vfsinks-\(clean)-\(UInt32.random(in: 0...UInt32.max))"
    try! FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    return dir
}

/// Fills a frame with a moving gradient plus deterministic noise (camera-like content).
func fillFrame(_ f: Frame, index: Int, noise: Int = 12, seed: UInt64 = 1) {
    let fmt = f.format
    var rng = seed &+ UInt64(index) &* 0x9E3779B97F4A7C15 | 1
    @inline(__always) func next() -> UInt64 { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng }
    let p = f.data.assumingMemoryBound(to: UInt8.self)
    switch fmt.pixelFormat {
    case .yuyv, .uyvy:
        for y in 0..<fmt.height {
            let row = p + y * fmt.bytesPerRow
            for x in 0..<fmt.width {
                let n = noise > 0 ? Int(next() % UInt64(noise)) : 0
                let luma = UInt8(clamping: (x * 200 / fmt.width + y * 40 / fmt.height + index * 3) % 220 + 16 + n)
                let chroma = UInt8(clamping: x & 1 == 0 ? 90 + (y * 60 / fmt.height) : 160 - (x * 50 / fmt.width))
                if fmt.pixelFormat == .yuyv { row[2 * x] = luma; row[2 * x + 1] = chroma } else { row[2 * x + 1] = luma; row[2 * x] = chroma }
            }
        }
    default:
        let n = f.bytesUsed
        for i in 0..<n {
            p[i] = UInt8(truncatingIfNeeded: (i % max(1, fmt.bytesPerRow)) * 200 / max(1, fmt.bytesPerRow) + index * 3 + Int(noise > 0 ? next() % UInt64(noise) : 0))
        }
    }
    f.sequence = UInt64(index)
    f.timestamp = Timestamp(nanoseconds: 1_000_000_000 + UInt64(index) * 33_333_333)
}

struct ProbeResult {
    var streams: [[String: Any]]
    var format: [String: Any]
    func stream(_ type: String) -> [String: Any]? { streams.first { $0["codec_type"] as? String == type } }
}

/// Runs a program and returns (status, stdout, stderr).
@discardableResult
func run(_ path: String, _ args: [String]) throws -> (Int32, String, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: path)
    p.arguments = args
    let out = Pipe(), err = Pipe()
    p.standardOutput = out; p.standardError = err
    try p.run()
    let o = out.fileHandleForReading.readDataToEndOfFile()
    let e = err.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
}

/// ffprobe's view of a file: streams (with counted frames) and the container.
func ffprobe(_ file: String) throws -> ProbeResult {
    let (status, out, err) = try run("/usr/bin/ffprobe", ["-v", "error", "-show_streams", "-show_format", "-count_frames", "-of", "json", file])
    guard status == 0 else { throw SinkError.corruptData("ffprobe failed on \(file): \(err)") }
    let json = try JSONSerialization.jsonObject(with: Data(out.utf8)) as! [String: Any]
    return ProbeResult(streams: json["streams"] as? [[String: Any]] ?? [], format: json["format"] as? [String: Any] ?? [:])
}

/// Decodes every frame with ffmpeg; returns ffmpeg's error output (empty when all frames decode).
func ffmpegDecodeErrors(_ file: String) throws -> String {
    let (status, _, err) = try run("/usr/bin/ffmpeg", ["-v", "error", "-i", file, "-f", "null", "-"])
    return status == 0 ? err : "exit \(status): " + err
}

func intValue(_ any: Any?) -> Int? {
    if let s = any as? String { return Int(s) }
    return any as? Int
}
func doubleValue(_ any: Any?) -> Double? {
    if let s = any as? String { return Double(s) }
    return any as? Double
}

/// A non-live source of `count` synthetic frames at `interval` ns, for engine runs in tests.
final class SyntheticSource: CaptureSource, @unchecked Sendable {
    // @unchecked Sendable: `produced` is touched only by the capture thread (next/start).
    let format: FrameFormat
    let count: Int
    let interval: UInt64
    let pool: FramePool
    let mjpeg: Bool
    private var produced = 0
    private let encoder: JPEGEncoder?
    var isLive: Bool { false }
    var controls: (any DeviceControlling)? { nil }
    var info: DeviceInfo { DeviceInfo(id: "test", name: "test", driver: "test", bus: "test", formats: [], controls: [], isLive: false) }
    var activeConfiguration: StreamConfiguration? { configuration }
    var configuration: StreamConfiguration { StreamConfiguration(format: format, interval: FrameInterval(numerator: UInt32(interval / 1000), denominator: 1_000_000), bufferCount: 8) }

    init(format: FrameFormat, count: Int, interval: UInt64 = 33_333_333, mjpeg: Bool = false) {
        self.count = count
        self.interval = interval
        self.mjpeg = mjpeg
        self.format = mjpeg ? FrameFormat(.mjpeg, width: format.width, height: format.height) : format
        self.pool = FramePool(format: self.format, count: 12)
        self.encoder = mjpeg ? try! JPEGEncoder() : nil
    }
    func configure(_ request: StreamRequest) throws -> StreamConfiguration { configuration }
    func start() throws {}
    func stop() {}
    func next(timeoutNanoseconds: UInt64) throws -> SourceEvent {
        guard produced < count else { return .endOfStream }
        guard let f = pool.acquire(timeoutNanoseconds: timeoutNanoseconds) else { return .timeout }
        if let encoder {
            let raw = Frame(capacity: FrameFormat(.yuyv, width: format.width, height: format.height).maxByteCount, format: FrameFormat(.yuyv, width: format.width, height: format.height))
            fillFrame(raw, index: produced)
            let jpeg = try encoder.encode(raw, quality: 75)
            f.data.copyMemory(from: jpeg.baseAddress!, byteCount: jpeg.count)
            f.bytesUsed = jpeg.count
        } else {
            fillFrame(f, index: produced)
        }
        f.sequence = UInt64(produced)
        f.timestamp = Timestamp(nanoseconds: 10_000_000_000 + UInt64(produced) * interval)
        produced += 1
        return .frame(f)
    }
}

/// Records the movie delegate's events.
final class RecordingEvents: MovieRecordingDelegate, @unchecked Sendable {
    // @unchecked Sendable: all state behind `lock`.
    let lock = ConditionLock()
    var started: [String] = []
    var finished: [(String, MovieRecordingSummary, MovieRecordingError?)] = []
    func movieOutput(_ output: MovieFileOutput, didStartRecordingTo path: String) { lock.withLock { started.append(path) } }
    func movieOutput(_ output: MovieFileOutput, didFinishRecordingTo path: String, summary: MovieRecordingSummary, error: MovieRecordingError?) {
        lock.withLock { finished.append((path, summary, error)); lock.broadcast() }
    }
    func waitFinished(_ n: Int = 1, timeout: Double = 10) -> Bool {
        let deadline = monotonicNanoseconds() + UInt64(timeout * 1e9)
        lock.lock(); defer { lock.unlock() }
        while finished.count < n { if !lock.wait(untilMonotonicNanoseconds: deadline) { return finished.count >= n } }
        return true
    }
}

/// Drives a consumer by hand on the calling thread, as the engine's consumer thread would.
func feed(_ consumer: any FrameConsumer, pool: FramePool, range: Range<Int>, interval: UInt64 = 33_333_333, noise: Int = 12, prepare: ((Frame, Int) -> Void)? = nil) {
    for i in range {
        let f = pool.acquire()!
        fillFrame(f, index: i, noise: noise)
        f.timestamp = Timestamp(nanoseconds: 10_000_000_000 + UInt64(i) * interval)
        prepare?(f, i)
        consumer.consume(f)
        f.release()
    }
}

/// Remembers the sequence number and checksum of every frame it is given: what the engine
/// delivered, to compare a dump's contents with. Never falls behind (an output beside the ones
/// under test).
final class HashingWitness: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: only the mutex-guarded list is shared.
    let consumerName = "witness"
    private let seen = LockedBox<[(sequence: UInt64, hash: UInt64)]>([])
    var frames: [(sequence: UInt64, hash: UInt64)] { seen.withLock { $0 } }
    func consume(_ frame: Frame) {
        let h = XXHash64.hash(UnsafeRawBufferPointer(start: frame.data, count: frame.bytesUsed))
        let s = frame.sequence
        seen.withLock { $0.append((s, h)) }
    }
}

/// A session of `device` (opened through the core directory) at `.inputPriority` with `outputs`,
/// committed; with `lockLoops`, the device's exposure and focus locked first.
func simSession(_ device: String, outputs: [any CaptureOutput], lockLoops: Bool = false) throws -> (CaptureSession, CaptureDevice) {
    let dev = try CaptureDevice.open(device, directory: .core)
    let session = CaptureSession()
    session.beginConfiguration()
    try session.addInput(CaptureDeviceInput(device: dev))
    if lockLoops { try dev.configure { s in s.exposureMode = .locked; s.focusMode = .locked } }
    try session.setSessionPreset(.inputPriority)
    for o in outputs { try session.addOutput(o) }
    try session.commitConfiguration()
    return (session, dev)
}

/// Records `movie` to `path` over the whole run of `session` (a source that ends by itself) and
/// waits for the recording's end.
func recordWholeRun(_ session: CaptureSession, _ movie: MovieFileOutput, to path: String) throws -> RecordingEvents {
    let events = RecordingEvents()
    try movie.startRecording(to: path, delegate: events)
    try session.startRunning()
    session.waitUntilFinished()
    session.stopRunning()
    #expect(events.waitFinished())
    return events
}
