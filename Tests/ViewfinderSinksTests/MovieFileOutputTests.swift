import Foundation
import Testing
import Viewfinder
@testable import ViewfinderSinks

@Suite struct MovieFileOutputTests {
    let format = FrameFormat(.yuyv, width: 320, height: 240)

    func config(_ f: FrameFormat) -> StreamConfiguration { StreamConfiguration(format: f, interval: FrameInterval(fps: 30), bufferCount: 8) }

    @Test func recordsThroughTheEngineWithCaptureTimestamps() throws {
        let dir = makeTempDirectory()
        let path = dir + "/engine.mov"
        let source = SyntheticSource(format: format, count: 60)
        let output = MovieFileOutput()
        let events = RecordingEvents()
        try output.startRecording(to: path, delegate: events)  // before the session starts: no frame is lost
        let engine = CaptureEngine(source: source, configuration: source.configuration, stages: [], consumers: [output])
        try engine.start()
        engine.waitUntilFinished()
        #expect(events.waitFinished())
        let (p, summary, error) = events.finished[0]
        #expect(p == path)
        #expect(error == nil)
        #expect(summary.frames == 60)
        #expect(summary.reason == .sessionEnded)
        #expect(summary.successfullyFinished)
        #expect(events.started == [path])
        let probe = try ffprobe(path)
        let v = try #require(probe.stream("video"))
        #expect(intValue(v["nb_read_frames"]) == 60)
        #expect(abs((doubleValue(v["duration"]) ?? 0) - 2.0) < 0.01)
        #expect(try ffmpegDecodeErrors(path) == "")
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// A stream none of whose frames can be encoded (here a Bayer mosaic with no decoder to make
    /// its view) ends the recording with the error after 30 frames, instead of running on (1 Dec
    /// sweep: `record --duration 3` on a Bayer camera never ended, a log line per frame).
    @Test func aRecordingWhoseFramesNeverEncodeEndsWithTheError() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/bayer.mov"
        let bayer = FrameFormat(.sbggr8, width: 64, height: 48)
        let output = MovieFileOutput()
        #expect(output.needsPixels(for: .sbggr8) && !output.needsPixels(for: .mjpeg) && !output.needsPixels(for: .rgb24))
        let events = RecordingEvents()
        try output.startRecording(to: path, delegate: events)
        // Handed the mosaic itself (an engine would have given it a decoded view, as it asks).
        try output.start(configuration: config(bayer))
        let f = Frame(capacity: bayer.maxByteCount, format: bayer)
        for i in 0..<200 where events.finished.isEmpty {
            fillFrame(f, index: i)
            f.sequence = UInt64(i)
            f.timestamp = Timestamp(nanoseconds: 1_000_000_000 + UInt64(i) * 33_333_333)
            output.consume(f)
        }
        output.finish(error: nil)
        #expect(events.waitFinished())
        let (_, summary, error) = events.finished[0]
        #expect(summary.frames == 0 && summary.reason == .failed, "\(summary)")
        guard case .encodingFailed(let m)? = error else { Issue.record("error \(String(describing: error))"); return }
        #expect(m.contains("Bayer mosaic") && m.contains("first 30 frames"), "\(m)")
    }

    /// The summary's dropped frames come from the engine's drop notices: drops between frames,
    /// drops after the last frame (no later frame could carry them), and none from before the
    /// recording began.
    @Test func droppedFramesCountEveryNoticeOfTheRecording() throws {
        let dir = makeTempDirectory()
        let path = dir + "/drops.mov"
        let output = MovieFileOutput()
        #expect(output.wantsDropNotices)
        let events = RecordingEvents()
        let pool = FramePool(format: format, count: 4)
        try output.start(configuration: config(format))
        feed(output, pool: pool, range: 0..<3)                       // before the recording
        output.didDrop(sequence: 3, count: 2, reason: .ringFull)     // before it too
        try output.startRecording(to: path, delegate: events)
        feed(output, pool: pool, range: 5..<10)                      // the recording begins at 5
        output.didDrop(sequence: 10, count: 3, reason: .storageBacklog)
        feed(output, pool: pool, range: 13..<20)
        output.didDrop(sequence: 20, count: 4, reason: .storageBacklog) // after the last frame
        output.finish(error: nil)
        #expect(events.finished.count == 1)
        let (_, summary, error) = events.finished[0]
        #expect(error == nil)
        #expect(summary.frames == 12)
        #expect(summary.droppedFrames == 7)
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func maximumDurationEndsCleanly() throws {
        let dir = makeTempDirectory()
        let path = dir + "/maxdur.mov"
        var s = MovieOutputSettings()
        s.maximumDuration = 1.0
        let output = MovieFileOutput(settings: s)
        let events = RecordingEvents()
        let pool = FramePool(format: format, count: 4)
        try output.start(configuration: config(format))
        try output.startRecording(to: path, delegate: events)
        feed(output, pool: pool, range: 0..<90)
        output.finish(error: nil)
        #expect(events.finished.count == 1)
        let (_, summary, error) = events.finished[0]
        #expect(error == .maximumDurationReached(seconds: 1.0))
        #expect(summary.reason == .maximumDurationReached)
        #expect(summary.successfullyFinished)
        #expect(summary.frames == 30)
        let v = try #require(try ffprobe(path).stream("video"))
        #expect(intValue(v["nb_read_frames"]) == 30)
        #expect(abs((doubleValue(v["duration"]) ?? 0) - 1.0) < 0.005)
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func maximumFileSizeEndsBeforeTheLimit() throws {
        let dir = makeTempDirectory()
        let path = dir + "/maxsize.mov"
        var s = MovieOutputSettings()
        s.maximumFileSize = 300_000
        let output = MovieFileOutput(settings: s)
        let events = RecordingEvents()
        let pool = FramePool(format: format, count: 4)
        try output.start(configuration: config(format))
        try output.startRecording(to: path, delegate: events)
        feed(output, pool: pool, range: 0..<200, noise: 60)
        output.finish(error: nil)
        let (_, summary, error) = try #require(events.finished.first)
        #expect(error == .maximumFileSizeReached(bytes: 300_000))
        #expect(summary.successfullyFinished)
        let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as! UInt64
        #expect(size <= 300_000)
        #expect(size > 200_000)
        let v = try #require(try ffprobe(path).stream("video"))
        #expect(intValue(v["nb_read_frames"]) == summary.frames)
        #expect(summary.frames > 5 && summary.frames < 200)
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func preRollPutsTheSecondBeforeTheTriggerFirst() throws {
        let dir = makeTempDirectory()
        let path = dir + "/preroll.mov"
        var s = MovieOutputSettings()
        s.preRollSeconds = 1.0
        s.preRollBytes = 8 << 20
        let output = MovieFileOutput(settings: s)
        let events = RecordingEvents()
        let pool = FramePool(format: format, count: 4)
        try output.start(configuration: config(format))
        feed(output, pool: pool, range: 0..<90)       // 3 s before the trigger
        try output.startRecording(to: path, delegate: events)
        feed(output, pool: pool, range: 90..<120)     // 1 s after it
        output.stopRecording()
        feed(output, pool: pool, range: 120..<125)
        output.finish(error: nil)
        let (_, summary, error) = try #require(events.finished.first)
        #expect(error == nil)
        #expect(summary.reason == .stopped)
        // Frames 59...89 are within 1 s of frame 89 (the window is inclusive of its ends up to 1 s).
        #expect(summary.preRollFrames == 31)
        #expect(summary.frames == 31 + 30)
        let (_, out, _) = try run("/usr/bin/ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "packet=pts_time", "-of", "csv=p=0", path])
        let pts = out.split(separator: "\n").compactMap { Double($0) }
        #expect(pts.count == 61)
        #expect(abs((pts.last ?? 0) - 2.0) < 0.001)
        #expect(try ffmpegDecodeErrors(path) == "")
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func mjpegIsPassedThroughByteForByte() throws {
        let dir = makeTempDirectory()
        let path = dir + "/mjpeg.mov"
        let source = SyntheticSource(format: FrameFormat(.yuyv, width: 160, height: 120), count: 20, mjpeg: true)
        let output = MovieFileOutput()
        let events = RecordingEvents()
        try output.startRecording(to: path, delegate: events)
        let engine = CaptureEngine(source: source, configuration: source.configuration, stages: [], consumers: [output])
        try engine.start()
        engine.waitUntilFinished()
        #expect(events.waitFinished())
        // Extract the packets and compare with a fresh encode of the same frames at the source's quality.
        let (_, out, _) = try run("/usr/bin/ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "packet=size", "-of", "csv=p=0", path])
        let sizes = out.split(separator: "\n").compactMap { Int($0) }
        let enc = try JPEGEncoder()
        let raw = Frame(capacity: FrameFormat(.yuyv, width: 160, height: 120).maxByteCount, format: FrameFormat(.yuyv, width: 160, height: 120))
        let expected = try (0..<20).map { i -> Int in fillFrame(raw, index: i); return try enc.encode(raw, quality: 75).count }
        #expect(sizes == expected)
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func existingFileIsNotOverwrittenUnlessAsked() throws {
        let dir = makeTempDirectory()
        let path = dir + "/x.mov"
        _ = FileManager.default.createFile(atPath: path, contents: Data([9]))
        let output = MovieFileOutput()
        try output.start(configuration: config(format))
        #expect(throws: SinkError.fileExists(path: path)) { try output.startRecording(to: path, delegate: nil) }
        #expect(!output.isRecording)
        try output.startRecording(to: path, overwrite: true, delegate: nil)
        #expect(output.isRecording)
        #expect(throws: MovieRecordingError.alreadyRecording(path: path)) { try output.startRecording(to: dir + "/y.mov", delegate: nil) }
        output.finish(error: nil)
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func audioFromAnotherThreadGoesIntoASecondTrack() throws {
        let dir = makeTempDirectory()
        let path = dir + "/av.mov"
        var s = MovieOutputSettings()
        s.audio = PCMFormat(sampleRate: 16000, channels: 1)
        let output = MovieFileOutput(settings: s)
        let events = RecordingEvents()
        try output.start(configuration: config(format))
        try output.startRecording(to: path, delegate: events)
        let pool = FramePool(format: format, count: 4)
        // 20 ms audio blocks, stamped on the video's clock, delivered from another thread.
        let audio = EngineThread(name: "test-audio") {
            var pcm = [Int16](repeating: 0, count: 320)
            for k in 0..<320 { pcm[k] = Int16(6000 * sin(Double(k) * 2 * .pi * 440 / 16000)) }
            for b in 0..<100 {
                pcm.withUnsafeBytes { output.appendAudio($0, timestamp: Timestamp(nanoseconds: 10_000_000_000 + UInt64(b) * 20_000_000)) }
                usleep(200)
            }
        }
        feed(output, pool: pool, range: 0..<60) { _, _ in usleep(400) }
        audio.join()
        output.stopRecording()
        feed(output, pool: pool, range: 60..<62)
        output.finish(error: nil)
        let (_, summary, error) = try #require(events.finished.first)
        #expect(error == nil)
        #expect(summary.frames == 60)
        let probe = try ffprobe(path)
        #expect(probe.streams.count == 2)
        let a = try #require(probe.stream("audio"))
        #expect(a["codec_name"] as? String == "pcm_s16le")
        #expect(intValue(a["sample_rate"]) == 16000)
        // Audio that arrived while recording, up to the last fragment; never more than was sent.
        let ad = doubleValue(a["duration"]) ?? 0
        #expect(ad > 0.5 && ad <= 2.0 + 0.001, "audio duration \(ad)")
        #expect(try ffmpegDecodeErrors(path) == "")
        try? FileManager.default.removeItem(atPath: dir)
    }
}
