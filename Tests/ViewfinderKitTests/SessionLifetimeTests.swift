import Foundation
import CViewfinderKernels
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

/// A session that has stopped, and that nobody holds any more, is freed with everything it made:
/// its device, outputs and their pools. The soak found each finished 1080p session keeping about
/// 145 MB (frames held their pool strongly and the pool its frames), and after that fix still a
/// smaller step per session; this test runs the soak's configuration at a small size and checks
/// every object of a run is gone once its holders are.
@Suite(.serialized) struct SessionLifetimeTests {
    @Test func aStoppedSessionNobodyHoldsIsFreedWithItsDeviceOutputsAndStages() throws {
        let dir = NSTemporaryDirectory() + "vf-lifetime-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        weak var weakSession: CaptureSession?
        weak var weakDevice: CaptureDevice?
        weak var weakMovie: MovieFileOutput?
        weak var weakDump: RawDumpOutput?
        weak var weakVideo: VideoDataOutput?
        var delivered = 0
        try {
            let device = try CaptureDevice.open("sim:width=320,height=240,paced=false", directory: .standard)
            let session = CaptureSession(registry: .builtIn)
            let movie = MovieFileOutput()
            let dump = RawDumpOutput(path: dir + "/d.vfdump", overwrite: true)
            let video = VideoDataOutput()
            let sink = CountingSink()
            weakSession = session; weakDevice = device; weakMovie = movie; weakDump = dump; weakVideo = video
            session.beginConfiguration()
            try session.addInput(CaptureDeviceInput(device: device))
            try session.setSessionPreset(.inputPriority)
            try session.addOutput(movie)
            try session.addOutput(dump)
            try session.addOutput(video)
            try video.setVideoSettings(VideoOutputSettings(pixelFormat: .nv12))
            video.setDelegate(sink, queue: nil)
            try session.setStages(StageSpec.parseList("exposure,focus,white_balance,stabilise:lookahead=5,deadline:max_age_ms=60000,null"))
            try session.setEngineOptions(EngineOptions(durationSeconds: 0.5))
            try session.commitConfiguration()
            try movie.startRecording(to: dir + "/m.mov", overwrite: true, delegate: nil)
            try session.startRunning()
            session.waitUntilFinished()
            session.stopRunning()
            delivered = sink.frames.withLock { $0 }
        }()
        #expect(delivered > 0)
        // The outputs' and the dispatch queue's last work may still be unwinding for a moment.
        let deadline = monotonicNanoseconds() + 5_000_000_000
        while (weakSession != nil || weakDevice != nil || weakMovie != nil || weakDump != nil || weakVideo != nil) && monotonicNanoseconds() < deadline {
            usleep(10_000)
        }
        #expect(weakSession == nil, "the session")
        #expect(weakDevice == nil, "the device")
        #expect(weakMovie == nil, "the movie output")
        #expect(weakDump == nil, "the dump output")
        #expect(weakVideo == nil, "the video data output")
    }

    /// The memory in use (glibc's `mallinfo2`: small blocks and mmapped ones, plus the frames' own
    /// mappings) after sessions, not the resident set, which also holds what the allocator keeps
    /// for reuse.
    @Test func sessionsOneAfterAnotherKeepNoHeap() throws {
        let dir = NSTemporaryDirectory() + "vf-heap-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func inUse() -> Int { Int(vf_heap_in_use_bytes()) + Frame.mappedFrameBytes }
        func session(_ k: Int) throws {
            let device = try CaptureDevice.open("sim:width=1280,height=720,paced=false", directory: .standard)
            let session = CaptureSession(registry: .builtIn)
            let movie = MovieFileOutput()
            let dump = RawDumpOutput(path: dir + "/d\(k).vfdump", overwrite: true)
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
            try session.setEngineOptions(EngineOptions(durationSeconds: 1))
            try session.commitConfiguration()
            try movie.startRecording(to: dir + "/m\(k).mov", overwrite: true, delegate: nil)
            try session.startRunning()
            session.waitUntilFinished()
            session.stopRunning()
            try? FileManager.default.removeItem(atPath: dir + "/d\(k).vfdump")
            try? FileManager.default.removeItem(atPath: dir + "/m\(k).mov")
        }
        var levels: [Int] = []
        for k in 0..<5 { try session(k); usleep(200_000); levels.append(inUse()) }
        print("memory in use after each session: \(levels.map { String(format: "%.1f MB", Double($0) / 1048576) })")
        #expect(levels[4] - levels[1] < 4 << 20)
    }
}
