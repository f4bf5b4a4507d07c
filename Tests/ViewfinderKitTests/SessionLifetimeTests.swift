import Foundation
import Testing
@testable import Viewfinder
import ViewfinderKit

/// Counts what a video data output hands over (the delegate runs on the output's thread).
private final class CountingSink: VideoDataOutputDelegate, @unchecked Sendable {
    let frames = LockedBox(0)
    func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
        frames.withLock { $0 += 1 }
    }
}

/// A batch begun on a session of `device` at `.inputPriority` with `outputs`, for the caller to
/// add to and commit.
private func stagedSession(_ device: CaptureDevice, outputs: [any CaptureOutput]) throws -> CaptureSession {
    let session = CaptureSession(registry: .builtIn)
    session.beginConfiguration()
    try session.addInput(CaptureDeviceInput(device: device))
    try session.setSessionPreset(.inputPriority)
    for o in outputs { try session.addOutput(o) }
    return session
}

/// The objects of one finished run of the soak's configuration.
private struct Run {
    let session: CaptureSession, device: CaptureDevice
    let movie: MovieFileOutput, dump: RawDumpOutput, video: VideoDataOutput
    let delivered: Int
}

/// The soak's configuration (every built-in stage into a movie, a dump and an NV12 video data
/// output) run for `seconds` on `device`, stopped, its files deleted.
private func runAndStop(_ device: String, seconds: Double, in dir: String, tag: Int) throws -> Run {
    let device = try CaptureDevice.open(device, directory: .standard)
    let movie = MovieFileOutput()
    let dump = RawDumpOutput(path: dir + "/d\(tag).vfdump", overwrite: true)
    let video = VideoDataOutput()
    let sink = CountingSink()
    let session = try stagedSession(device, outputs: [movie, dump, video])
    try video.setVideoSettings(VideoOutputSettings(pixelFormat: .nv12))
    video.setDelegate(sink, queue: nil)
    try session.setStages(StageSpec.parseList("exposure,focus,white_balance,stabilise:lookahead=5,deadline:max_age_ms=60000,null"))
    try session.setEngineOptions(EngineOptions(durationSeconds: seconds))
    try session.commitConfiguration()
    try movie.startRecording(to: dir + "/m\(tag).mov", overwrite: true, delegate: nil)
    try session.startRunning()
    session.waitUntilFinished()
    session.stopRunning()
    try? FileManager.default.removeItem(atPath: dir + "/d\(tag).vfdump")
    try? FileManager.default.removeItem(atPath: dir + "/m\(tag).mov")
    return Run(session: session, device: device, movie: movie, dump: dump, video: video, delivered: sink.frames.withLock { $0 })
}

/// A session that has stopped, and that nobody holds any more, is freed with everything it made:
/// its device, outputs and their pools. The soak found each finished 1080p session keeping about
/// 145 MB (frames held their pool strongly and the pool its frames). The memory in use between
/// sessions is the soak's to measure (`viewfinder-soak`, its own process): in the test process
/// other suites allocate at the same time.
@Suite(.serialized) struct SessionLifetimeTests {
    let dir: String
    init() throws {
        dir = NSTemporaryDirectory() + "vf-lifetime-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    @Test func aStoppedSessionNobodyHoldsIsFreedWithItsDeviceOutputsAndStages() throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        weak var session: CaptureSession?, device: CaptureDevice?
        weak var movie: MovieFileOutput?, dump: RawDumpOutput?, video: VideoDataOutput?
        var delivered = 0
        try {
            let r = try runAndStop("sim:width=320,height=240,paced=false", seconds: 0.5, in: dir, tag: 0)
            session = r.session; device = r.device; movie = r.movie; dump = r.dump; video = r.video
            delivered = r.delivered
        }()
        #expect(delivered > 0)
        // The outputs' and the dispatch queue's last work may still be unwinding for a moment.
        let deadline = monotonicNanoseconds() + 5_000_000_000
        while (session != nil || device != nil || movie != nil || dump != nil || video != nil) && monotonicNanoseconds() < deadline {
            usleep(10_000)
        }
        #expect(session == nil, "the session")
        #expect(device == nil, "the device")
        #expect(movie == nil, "the movie output")
        #expect(dump == nil, "the dump output")
        #expect(video == nil, "the video data output")
    }

    /// A session whose last reference goes while it runs stops, as AVFoundation's does: frames stop
    /// coming, the recording is complete, and the device goes (it ran on for good, the camera
    /// held, the delegate called 30 times a second).
    @Test func aRunningSessionNobodyHoldsStops() throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sink = CountingSink()
        let events = MovieEnd()
        weak var session: CaptureSession?, device: CaptureDevice?
        try {
            let d = try CaptureDevice.open("sim:width=320,height=240,fps=30", directory: .standard)
            let video = VideoDataOutput()
            let movie = MovieFileOutput()
            let s = try stagedSession(d, outputs: [video, movie])
            video.setDelegate(sink, queue: nil)
            try s.commitConfiguration()
            try movie.startRecording(to: dir + "/dropped.mov", delegate: events)
            try s.startRunning()
            session = s; device = d
            let deadline = monotonicNanoseconds() + 10_000_000_000
            while sink.frames.withLock({ $0 }) < 10 && monotonicNanoseconds() < deadline { usleep(10_000) }
        }()
        #expect(session == nil)
        #expect(events.ended.wait(timeout: .now() + 10) == .success, "the recording did not end")
        let after = sink.frames.withLock { $0 }
        #expect(after >= 10)
        usleep(500_000)
        #expect(sink.frames.withLock { $0 } <= after + 1, "frames kept coming after the session went")
        let deadline = monotonicNanoseconds() + 5_000_000_000
        while device != nil && monotonicNanoseconds() < deadline { usleep(10_000) }
        #expect(device == nil, "the device is still held")
        let (rc, out) = try probeFrames(dir + "/dropped.mov")
        #expect(rc == 0 && (Int(out) ?? 0) >= 10, "ffprobe: \(out)")
    }
}

/// Signals when a recording ends.
private final class MovieEnd: MovieRecordingDelegate, @unchecked Sendable {
    let ended = DispatchSemaphore(value: 0)
    func movieOutput(_ output: MovieFileOutput, didFinishRecordingTo path: String, summary: MovieRecordingSummary, error: MovieRecordingError?) {
        ended.signal()
    }
}

/// The number of video frames ffprobe counts in a movie.
private func probeFrames(_ path: String) throws -> (Int32, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/ffprobe")
    p.arguments = ["-v", "error", "-count_frames", "-select_streams", "v", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path]
    let pipe = Pipe()
    p.standardOutput = pipe
    try p.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
}
