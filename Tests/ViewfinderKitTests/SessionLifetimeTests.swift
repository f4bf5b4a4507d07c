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
    let session = CaptureSession(registry: .builtIn)
    let movie = MovieFileOutput()
    let dump = RawDumpOutput(path: dir + "/d\(tag).vfdump", overwrite: true)
    let video = VideoDataOutput()
    let sink = CountingSink()
    session.beginConfiguration()
    try session.addInput(CaptureDeviceInput(device: device))
    try session.setSessionPreset(.inputPriority)
    try session.addOutput(movie)
    try session.addOutput(dump)
    try session.addOutput(video)
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
}
