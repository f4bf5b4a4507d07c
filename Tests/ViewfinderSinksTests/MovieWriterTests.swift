import Foundation
import Testing
import Viewfinder
@testable import ViewfinderSinks

@Suite struct MovieWriterTests {
    /// A rotation goes into the video track's matrix: ffprobe reports it (its display matrix says
    /// −90 for a picture turned 90° clockwise) and ffmpeg, which applies it, decodes a 90°/270°
    /// movie as a picture of swapped width and height.
    @Test(arguments: [0, 90, 180, 270])
    func rotationIsInTheTrackMatrixAndPlayersApplyIt(_ angle: Int) throws {
        let dir = makeTempDirectory()
        let path = dir + "/rot\(angle).mov"
        let pool = FramePool(format: FrameFormat(.yuyv, width: 160, height: 96), count: 1)
        let frame = pool.acquire()!
        let enc = try JPEGEncoder()
        let writer = try MovieWriter(path: path, tracks: [.mjpegVideo(width: 160, height: 96)], rotation: angle)
        for i in 0..<5 {
            fillFrame(frame, index: i)
            try withExtendedLifetime(enc) { try writer.appendVideo(try enc.encode(frame, quality: 80), timestampNanoseconds: 1_000_000_000 + UInt64(i) * 33_333_333) }
        }
        try writer.finish()
        frame.release()
        let (_, out, _) = try run("/usr/bin/ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "stream_side_data=rotation", "-of", "csv=p=0", path])
        let reported = Int(Double(out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0)
        #expect((360 - reported) % 360 == angle, "ffprobe rotation '\(out)' for \(angle)°")
        // ffmpeg turns the picture as players do: 90 and 270 swap width and height.
        let (_, size, _) = try run("/usr/bin/ffmpeg", ["-v", "error", "-i", path, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "gray", "-"])
        #expect(size.utf8.count > 0)
        let (_, dims, _) = try run("/usr/bin/sh", ["-c", "/usr/bin/ffmpeg -v error -i '\(path)' -frames:v 1 -f image2 -y '\(dir)/f.png' && /usr/bin/ffprobe -v error -show_entries stream=width,height -of csv=p=0 '\(dir)/f.png'"])
        #expect(dims.trimmingCharacters(in: .whitespacesAndNewlines) == (angle % 180 == 0 ? "160,96" : "96,160"), "decoded \(dims)")
        #expect(throws: SinkError.self) { _ = try MovieWriter(path: dir + "/bad.mov", tracks: [.mjpegVideo(width: 16, height: 16)], rotation: 45) }
    }

    @Test func variableFrameRateVideoAndPCMAudioReadByFFprobe() throws {
        let dir = makeTempDirectory()
        let path = dir + "/vfr.mov"
        let pool = FramePool(format: FrameFormat(.yuyv, width: 160, height: 120), count: 1)
        let frame = pool.acquire()!
        let enc = try JPEGEncoder()
        let writer = try MovieWriter(path: path, tracks: [.mjpegVideo(width: 160, height: 120), .pcmAudio(sampleRate: 48000, channels: 2)], fragmentInterval: 0.25)
        // 30 frames at 30 fps, then 15 at 15 fps: 1.0 s + 1.0 s (the last keeps the previous duration).
        var t: UInt64 = 5_000_000_000
        var audioT = t
        for i in 0..<45 {
            fillFrame(frame, index: i)
            try withExtendedLifetime(enc) { try writer.appendVideo(try enc.encode(frame, quality: 80), timestampNanoseconds: t) }
            t += i < 30 ? 33_333_333 : 66_666_667
            // Audio in 10 ms blocks up to the video time.
            while audioT + 10_000_000 <= t {
                var pcm = [Int16](repeating: 0, count: 480 * 2)
                for k in 0..<480 { let v = Int16(8000 * sin(Double(k) / 480 * 2 * .pi * 4)); pcm[2 * k] = v; pcm[2 * k + 1] = v }
                try pcm.withUnsafeBytes { try writer.appendAudio($0, timestampNanoseconds: audioT) }
                audioT += 10_000_000
            }
        }
        try writer.finish()
        frame.release()

        let probe = try ffprobe(path)
        #expect(probe.streams.count == 2)
        let v = try #require(probe.stream("video"))
        #expect(v["codec_name"] as? String == "mjpeg")
        #expect(intValue(v["nb_read_frames"]) == 45)
        #expect(intValue(v["width"]) == 160)
        let vd = try #require(doubleValue(v["duration"]))
        #expect(abs(vd - 2.0) < 0.01, "video duration \(vd)")
        let a = try #require(probe.stream("audio"))
        #expect(a["codec_name"] as? String == "pcm_s16le")
        #expect(intValue(a["channels"]) == 2)
        #expect(intValue(a["sample_rate"]) == 48000)
        let ad = try #require(doubleValue(a["duration"]))
        #expect(abs(ad - 1.99) < 0.03, "audio duration \(ad)")
        #expect(try ffmpegDecodeErrors(path) == "")

        // The timestamps ffprobe reads back are the capture timestamps (relative to the first).
        let (_, out, _) = try run("/usr/bin/ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "packet=pts_time", "-of", "csv=p=0", path])
        let pts = out.split(separator: "\n").compactMap { Double($0) }
        #expect(pts.count == 45)
        if pts.count == 45 {
            #expect(abs(pts[1] - 0.033333) < 0.0001)
            #expect(abs(pts[31] - (1.0 + 0.066667)) < 0.0001)
        }
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func refusesToOverwrite() throws {
        let dir = makeTempDirectory()
        let path = dir + "/exists.mov"
        _ = FileManager.default.createFile(atPath: path, contents: Data([1, 2, 3]))
        #expect(throws: SinkError.fileExists(path: path)) {
            _ = try MovieWriter(path: path, tracks: [.mjpegVideo(width: 16, height: 16)])
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data([1, 2, 3]))
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Rates above 65535 Hz and more than two channels (a version 2 sound description): ffprobe
    /// reads the rate, the channels, the duration, and the samples come back as written (1 Dec
    /// sweep: a 96 kHz microphone could not be recorded at all).
    @Test(arguments: [(96000, 2), (192000, 1), (48000, 6), (44100, 2)])
    func highRatesAndManyChannelsAreReadBack(_ rate: Int, _ channels: Int) throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/hi.mov"
        let writer = try MovieWriter(path: path, tracks: [.pcmAudio(sampleRate: rate, channels: channels)], fragmentInterval: 0.2)
        let frames = rate / 10
        var written: [Int16] = []
        for b in 0..<10 {
            var block = [Int16](repeating: 0, count: frames * channels)
            for k in 0..<frames { for c in 0..<channels { block[k * channels + c] = Int16(truncatingIfNeeded: (b * frames + k) * (c + 1)) } }
            written += block
            try block.withUnsafeBytes { try writer.appendAudio($0, timestampNanoseconds: 2_000_000_000 + UInt64(b) * 100_000_000) }
        }
        try writer.finish()
        let a = try #require(try ffprobe(path).stream("audio"))
        #expect(intValue(a["sample_rate"]) == rate)
        #expect(intValue(a["channels"]) == channels)
        #expect(a["codec_name"] as? String == "pcm_s16le")
        #expect(abs((doubleValue(a["duration"]) ?? 0) - 1.0) < 0.001)
        let (status, _, _) = try run("/usr/bin/ffmpeg", ["-v", "error", "-y", "-i", path, "-f", "s16le", "-acodec", "pcm_s16le", dir + "/back.raw"])
        #expect(status == 0)
        let back = try Data(contentsOf: URL(fileURLWithPath: dir + "/back.raw"))
        let samples = back.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        #expect(samples == written)
    }

    @Test func audioOnlyMovie() throws {
        let dir = makeTempDirectory()
        let path = dir + "/a.mov"
        let writer = try MovieWriter(path: path, tracks: [.pcmAudio(sampleRate: 8000, channels: 1)], fragmentInterval: 0.2)
        let block = [Int16](repeating: 1000, count: 800)
        for b in 0..<10 { try block.withUnsafeBytes { try writer.appendAudio($0, timestampNanoseconds: 3_000_000_000 + UInt64(b) * 100_000_000) } }
        #expect(throws: SinkError.self) { try writer.appendVideo(UnsafeRawBufferPointer(start: nil, count: 0), timestampNanoseconds: 0) }
        try writer.finish()
        let a = try #require(try ffprobe(path).stream("audio"))
        #expect(abs((doubleValue(a["duration"]) ?? 0) - 1.0) < 0.001)
        #expect(try ffmpegDecodeErrors(path) == "")
        try? FileManager.default.removeItem(atPath: dir)
    }
}
