import Foundation
import Testing
import Viewfinder
@testable import ViewfinderSinks

/// `AssetWriter`: processed frames and sound into a movie, as AVFoundation's `AVAssetWriter`.
@Suite struct AssetWriterTests {
    let format = FrameFormat(.yuyv, width: 320, height: 240)

    func frame(_ i: Int, format f: FrameFormat? = nil) -> SampleBuffer {
        let fmt = f ?? format
        let fr = Frame(capacity: fmt.maxByteCount, format: fmt)
        fillFrame(fr, index: i)
        fr.sequence = UInt64(i)
        fr.timestamp = Timestamp(nanoseconds: 5_000_000_000 + UInt64(i) * 33_333_333, clock: .monotonic)
        return SampleBuffer(retaining: fr)!
    }

    /// A 440 Hz stereo tone, 16-bit, `frames` frames starting at frame `start`.
    func tone(start: Int, frames: Int) -> [Int16] {
        (0..<frames).flatMap { k -> [Int16] in
            let v = Int16((sin(2 * Double.pi * 440 * Double(start + k) / 48000) * 12000).rounded())
            return [v, -v]
        }
    }

    @Test func writesVideoAndSoundThatFFmpegReadsBack() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let writer = AssetWriter(path: dir + "/out.mov")
        let video = AssetWriterInput(settings: .video(width: 320, height: 240, quality: 90))
        let audio = AssetWriterInput(settings: .audio(sampleRate: 48000, channels: 2))
        #expect(writer.canAdd(video))
        try writer.add(video)
        try writer.add(audio)
        #expect(!writer.canAdd(AssetWriterInput(settings: .video(width: 64, height: 64))))
        #expect(!video.isReadyForMoreMediaData, "not ready before writing starts")
        try writer.startWriting()
        #expect(throws: AssetWriterError.self) { try writer.add(AssetWriterInput(settings: .audio(sampleRate: 8000, channels: 1))) }
        writer.startSession(atSourceTime: Timestamp(nanoseconds: 5_000_000_000, clock: .monotonic))
        // 30 frames (1 s) and 1 s of sound in 10 ms blocks, interleaved as a capture would.
        var written: [Int16] = []
        let fmt = AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2)
        var block = 0
        for i in 0..<30 {
            while !video.isReadyForMoreMediaData { usleep(1000) }
            #expect(video.append(frame(i)))
            while block * 480 < (i + 1) * 1600 {
                let pcm = tone(start: block * 480, frames: 480)
                written += pcm
                let ok = pcm.withUnsafeBytes { audio.append(pcm: $0, format: fmt, timestamp: Timestamp(nanoseconds: 5_000_000_000 + UInt64(block) * 10_000_000, clock: .monotonic)) }
                #expect(ok)
                block += 1
            }
        }
        writer.endSession(atSourceTime: Timestamp(nanoseconds: 6_000_000_000, clock: .monotonic))
        video.markAsFinished()
        audio.markAsFinished()
        #expect(!video.append(frame(30)), "a finished input takes nothing")
        try writer.finishWriting()
        #expect(writer.status == .completed)
        #expect(video.appendedSamples == 30)

        let probe = try ffprobe(dir + "/out.mov")
        let v = try #require(probe.stream("video"))
        #expect(v["codec_name"] as? String == "mjpeg")
        #expect(intValue(v["width"]) == 320 && intValue(v["height"]) == 240)
        #expect(intValue(v["nb_read_frames"]) == 30)
        let a = try #require(probe.stream("audio"))
        #expect(a["codec_name"] as? String == "pcm_s16le")
        #expect(intValue(a["channels"]) == 2)
        #expect(abs((Double(v["duration"] as? String ?? "") ?? 0) - 1.0) < 0.002)
        // Every sample is the input's.
        let raw = dir + "/a.raw"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        p.arguments = ["-v", "error", "-y", "-i", dir + "/out.mov", "-map", "0:a", "-f", "s16le", "-acodec", "pcm_s16le", raw]
        try p.run(); p.waitUntilExit()
        let back = try Data(contentsOf: URL(fileURLWithPath: raw)).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        #expect(back == written)
    }

    @Test func thePullModelFeedsFramesUntilTheInputIsFinished() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let writer = AssetWriter(path: dir + "/pull.mov")
        let nv12 = FrameFormat(.nv12, width: 320, height: 240)
        let video = AssetWriterInput(settings: .video(width: 320, height: 240), maximumPendingSamples: 2)
        try writer.add(video)
        try writer.startWriting()
        writer.startSession(atSourceTime: Timestamp(nanoseconds: 5_000_000_000, clock: .monotonic))
        let next = LockedBox(0)
        let done = DispatchSemaphore(value: 0)
        let source = (0..<20).map { frame($0, format: nv12) }
        video.requestMediaDataWhenReady(on: DispatchQueue(label: "feed")) {
            while video.isReadyForMoreMediaData {
                let i = next.withLock { n -> Int in let i = n; n += 1; return i }
                if i >= source.count { video.markAsFinished(); done.signal(); return }
                video.append(source[i])
            }
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        try writer.finishWriting()
        let probe = try ffprobe(dir + "/pull.mov")
        #expect(intValue(probe.stream("video")?["nb_read_frames"]) == 20)
    }

    @Test func misuseAndBadInputAreTypedErrorsAndCancelRemovesTheFile() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Appending before the session starts fails the writer with the reason.
        let w1 = AssetWriter(path: dir + "/a.mov")
        let v1 = AssetWriterInput(settings: .video(width: 320, height: 240))
        try w1.add(v1)
        try w1.startWriting()
        #expect(!v1.append(frame(0)))
        #expect(w1.status == .failed)
        #expect(w1.error as? AssetWriterError == .invalidStatus(operation: "append before startSession(atSourceTime:)", status: .writing))
        #expect(throws: AssetWriterError.self) { try w1.finishWriting() }
        // A frame of the wrong size.
        let w2 = AssetWriter(path: dir + "/b.mov")
        let v2 = AssetWriterInput(settings: .video(width: 640, height: 480))
        try w2.add(v2)
        try w2.startWriting()
        w2.startSession(atSourceTime: Timestamp(nanoseconds: 0, clock: .monotonic))
        #expect(!v2.append(frame(0)))
        #expect(w2.error as? AssetWriterError == .formatMismatch("frame 320x240, input expects 640x480"))
        // Cancelled after the failure: the file it made goes, the failure stays said.
        #expect(FileManager.default.fileExists(atPath: dir + "/b.mov"))
        w2.cancelWriting()
        #expect(!FileManager.default.fileExists(atPath: dir + "/b.mov"))
        #expect(w2.status == .failed)
        // An existing file is not overwritten unless asked.
        _ = FileManager.default.createFile(atPath: dir + "/c.mov", contents: Data([1, 2, 3]))
        let w3 = AssetWriter(path: dir + "/c.mov")
        try w3.add(AssetWriterInput(settings: .video(width: 320, height: 240)))
        #expect(throws: SinkError.fileExists(path: dir + "/c.mov")) { try w3.startWriting() }
        #expect(w3.status == .failed)
        // Cancelled then, the file that was there before stays.
        w3.cancelWriting()
        #expect(FileManager.default.fileExists(atPath: dir + "/c.mov"))
        // Odd sizes and bad rates are refused when the input is added.
        #expect(throws: AssetWriterError.self) { try AssetWriter(path: dir + "/d.mov").add(AssetWriterInput(settings: .video(width: 321, height: 240))) }
        #expect(throws: AssetWriterError.self) { try AssetWriter(path: dir + "/d.mov").add(AssetWriterInput(settings: .audio(sampleRate: 10, channels: 2))) }
        // Cancel: the file is gone and nothing more is taken.
        let w4 = AssetWriter(path: dir + "/e.mov")
        let v4 = AssetWriterInput(settings: .video(width: 320, height: 240))
        try w4.add(v4)
        try w4.startWriting()
        w4.startSession(atSourceTime: Timestamp(nanoseconds: 0, clock: .monotonic))
        #expect(v4.append(frame(1)))
        w4.cancelWriting()
        #expect(w4.status == .cancelled)
        #expect(!FileManager.default.fileExists(atPath: dir + "/e.mov"))
        #expect(!v4.append(frame(2)))
    }
}
