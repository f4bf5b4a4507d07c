import Foundation
import Testing
import ViewfinderKit

/// ALSA's own plugins on a machine without a sound card: capture PCMs that read known signals
/// from files. They are not paced in real time; these tests check content and bookkeeping.
@Suite(.serialized) struct ALSAFileTests {
    init() { ALSAFixture.install() }

    @Test func theTestPCMsAreListedAndProbed() {
        let names = ALSA.hints().map(\.name)
        #expect(names.contains("vfsig"))
        let info = ALSA.probe("vfsig")
        #expect(info.sampleFormats == [.s16, .s32, .float32])
        #expect(info.rates.contains(48000) && info.rates.contains(44100))
        #expect(info.minimumChannels <= 2 && info.maximumChannels >= 2)
    }

    @Test func aMissingDeviceIsOneClearError() {
        #expect(throws: AudioError.deviceNotFound("no_such_pcm")) { try ALSACaptureSource(name: "no_such_pcm") }
        #expect(throws: AudioError.deviceNotFound("hw:97,0")) { try ALSACaptureSource(name: "hw:97,0") }
    }

    func capture(_ name: String, format: AudioSampleFormat, seconds: Double = 0.6) throws -> (CollectingConsumer, AudioStatistics, AudioStreamFormat) {
        let source = try ALSACaptureSource(name: name)
        var request = AudioStreamRequest(sampleFormat: format, sampleRate: 48000, channels: 2)
        request.periodFrames = 480
        let f = try source.configure(request)
        let c = CollectingConsumer()
        let engine = AudioCaptureEngine(source: source, format: f, consumers: [c])
        try engine.start()
        usleep(UInt32(seconds * 1e6))
        engine.stop()
        engine.waitUntilFinished()
        return (c, engine.statistics, f)
    }

    @Test(arguments: [("vfsig", AudioSampleFormat.s16), ("vfsig32", .s32), ("vfsigfloat", .float32)])
    func capturesTheFileSampleForSample(name: String, format: AudioSampleFormat) throws {
        let (c, s, f) = try capture(name, format: format)
        #expect(f == AudioStreamFormat(sampleFormat: format, sampleRate: 48000, channels: 2))
        let st = c.state
        #expect(st.finished && st.error == nil)
        #expect(s.selfPaced, "a file PCM is not real time; the engine must pace it itself")
        #expect(s.overruns == 0 && s.ringDrops == 0)
        #expect(s.frames == UInt64(st.samples.count / 2))
        #expect(st.samples.count / 2 > 48000 / 4)
        // Float full scale is ±1 in steps of 1/32768: every 16-bit value comes back exactly
        // (with 1/32767 steps, values above 16416 came back one lower).
        func expected(_ v: Int16) -> Int16 { v }
        var mismatches = 0
        for n in 0..<(st.samples.count / 2) {
            if st.samples[2 * n] != expected(ALSAFixture.left(n)) || st.samples[2 * n + 1] != expected(ALSAFixture.right(n)) { mismatches += 1 }
        }
        #expect(mismatches == 0)
        // Positions are contiguous and stamps one period apart.
        for (a, b) in zip(st.periods, st.periods.dropFirst()) {
            #expect(b.position == a.position + UInt64(a.frames))
            #expect(b.timestamp.nanoseconds - a.timestamp.nanoseconds == UInt64(Double(a.frames) * 1e9 / 48000))
        }
    }

    @Test func aPreRollKeepsItsSound() throws {
        let dir = NSTemporaryDirectory() + "vfaudio-preroll-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/p.mov"
        var settings = MovieOutputSettings()
        settings.preRollSeconds = 1
        settings.preRollBytes = 32 << 20
        settings.maximumDuration = 2.5
        let movie = MovieFileOutput(settings: settings)
        let session = try simWithFileSound("sim:width=320,height=240,fps=30", outputs: [movie])
        try session.startRunning()
        // The pre-roll fills: a second and a half of frames (by the count, not a timer — a camera
        // slow to start under a loaded CI kept 15 frames in 1.5 s).
        let deadline = monotonicNanoseconds() + 30_000_000_000
        while (session.statistics?.captured ?? 0) < 45 && monotonicNanoseconds() < deadline { usleep(20_000) }
        let delegate = FinishWaiter()
        try movie.startRecording(to: path, delegate: delegate)
        #expect(delegate.wait(seconds: 15))
        session.stopRunning()
        let summary = try #require(delegate.summary)
        // The pre-roll is the movie's first second of 2.5: about 40 % of its frames whatever rate
        // a loaded machine let the sim keep (a CI run kept 23 frames in that second, not 30).
        #expect(summary.preRollFrames >= 10)
        #expect(Double(summary.preRollFrames) >= 0.3 * Double(summary.frames),
                "\(summary.preRollFrames) of \(summary.frames) frames from the pre-roll")
        // The pre-roll's second has the microphone's sound, not silence (it had 1 s of zeros).
        let samples = try movieAudioSamples(path)
        let first = try #require((0..<(samples.count / 2)).first { samples[2 * $0 + 1] != 0 })
        #expect(first < 4800, "the track's first sound is at \(Double(first) / 48000) s")
    }

    @Test func aMovieOfSimVideoAndFileSoundHasTheInputsSamplesAndLastsAsLongAsTheVideo() async throws {
        let dir = NSTemporaryDirectory() + "vfaudio-movie-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/a.mov"
        var settings = MovieOutputSettings()
        settings.maximumDuration = 2
        let movie = MovieFileOutput(settings: settings)
        let audioData = AudioDataOutput()
        let session = try simWithFileSound("sim:width=320,height=240,fps=30", outputs: [movie, audioData])
        let delegate = FinishWaiter()
        try movie.startRecording(to: path, delegate: delegate)
        let stream = audioData.buffers(bufferingNewest: 1024)   // subscribed before the session starts
        let collected = Task { var n = 0; for await b in stream { n += b.frames }; return n }
        try session.startRunning()
        #expect(delegate.wait(seconds: 10))
        session.stopRunning()
        let streamed = await collected.value
        let stats = try #require(session.audioStatistics)
        #expect(stats.selfPaced && stats.overruns == 0)
        #expect(UInt64(streamed) == stats.frames)
        // The run's peak is the loudest of the run, never below the last half second's meter.
        #expect(stats.maximumPeakDBFS >= stats.peakDBFS && stats.maximumPeakDBFS > -40)

        if let d = try ffprobeDurations(path) {
            #expect(abs(d.video - 2) < 0.001)
            #expect(abs(d.audio - d.video) < 1.0 / 30, "audio \(d.audio) s, video \(d.video) s")
        }
        let samples = try movieAudioSamples(path)
        #expect(abs(samples.count / 2 - 96000) < 1600)
        // After the silence before the microphone's first frame, the track is the input's frames
        // in order: the right channel counts, the left is the tone that goes with each count.
        let first = try #require((0..<(samples.count / 2)).first { samples[2 * $0 + 1] != 0 })
        #expect(first < 4800)
        let n0 = try #require(ALSAFixture.frameNumber(at: first, in: samples), "the track from its first sound on is not the input's frames")
        var wrong = 0
        for k in first..<(samples.count / 2) {
            let n = n0 + (k - first)
            if samples[2 * k + 1] != ALSAFixture.right(n) || samples[2 * k] != ALSAFixture.left(n) { wrong += 1 }
        }
        #expect(wrong == 0)
        let alignment = try #require(movie.audioAlignment)
        #expect(alignment.dropped == 0 && alignment.repeated == 0)
    }
}

extension ALSAFileTests {
    /// What an audio data output delivers goes straight into an asset writer's sound input, as
    /// AVFoundation's capture-to-`AVAssetWriter` pipelines do (2 Dec: only `AudioBuffer`, which
    /// the output does not deliver, had an `append`).
    @Test func anAudioDataOutputsBuffersAppendToAnAssetWriter() async throws {
        let dir = NSTemporaryDirectory() + "vfaudio-asset-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let audioData = AudioDataOutput()
        let session = try simWithFileSound("sim:width=160,height=120,fps=30,frames=30", outputs: [audioData])
        let stream = audioData.buffers(bufferingNewest: 1024)
        let collected = Task { var all: [AudioSampleBuffer] = []; for await b in stream { all.append(b) }; return all }
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        let buffers = await collected.value
        let first = try #require(buffers.first)

        let path = dir + "/sound.mov"
        let writer = AssetWriter(path: path)
        let video = AssetWriterInput(settings: .video(width: 160, height: 120))
        let sound = AssetWriterInput(settings: .audio(sampleRate: first.format.sampleRate, channels: first.format.channels))
        try writer.add(video)
        try writer.add(sound)
        try writer.startWriting()
        writer.startSession(atSourceTime: first.timestamp)
        for b in buffers {
            while !sound.isReadyForMoreMediaData { usleep(1000) }
            #expect(sound.append(b))
        }
        video.markAsFinished()
        sound.markAsFinished()
        try writer.finishWriting()
        #expect(writer.status == .completed)
        let written = try movieAudioSamples(path, track: 2)
        let expected = buffers.flatMap(\.int16Samples)
        #expect(written.count == expected.count && written == expected, "\(written.count) samples written of \(expected.count)")
    }
}

extension ALSAFileTests {
    /// A sequence whose consumer falls behind keeps its newest buffers; the ones it replaced are
    /// counted in droppedBuffers (2 Dec: not counted at all).
    @Test func buffersASequenceDropsAreCounted() async throws {
        let audioData = AudioDataOutput()
        let session = try simWithFileSound("sim:width=160,height=120,fps=30,frames=30", outputs: [audioData])
        let stream = audioData.buffers(bufferingNewest: 2)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        var taken = 0
        for await _ in stream { taken += 1 }
        #expect(taken == 2)
        #expect(audioData.deliveredBuffers > 2)
        #expect(audioData.droppedBuffers == audioData.deliveredBuffers - 2, "\(audioData.droppedBuffers) dropped of \(audioData.deliveredBuffers)")
    }
}

extension ALSAFileTests {
    /// With periods of almost a second the sound of the video's end comes with a period that ends
    /// well after it: the movie and the dump wait for it (2 Dec: with 0.9 s periods a 3 s movie
    /// had 2.44 s of sound, a dump 2.48 s, and nothing said so).
    @Test func longPeriodsStillCoverTheWholeVideo() throws {
        let dir = NSTemporaryDirectory() + "vfaudio-long-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var settings = MovieOutputSettings()
        settings.maximumDuration = 2
        let movie = MovieFileOutput(settings: settings)
        let dump = RawDumpOutput(path: dir + "/a.vfdump")
        let session = try simWithFileSound("sim:width=160,height=120,fps=30", outputs: [movie, dump], periodFrames: 43200)
        let delegate = FinishWaiter()
        try movie.startRecording(to: dir + "/a.mov", delegate: delegate)
        var o = EngineOptions(durationSeconds: 2)
        o.stallTimeoutSeconds = 10
        try session.setEngineOptions(o)
        try session.startRunning()
        #expect(delegate.wait(seconds: 15))
        session.waitUntilFinished()
        session.stopRunning()
        if let d = try ffprobeDurations(dir + "/a.mov") {
            #expect(abs(d.video - 2) < 0.001)
            #expect(abs(d.audio - d.video) < 1.0 / 30, "audio \(d.audio) s, video \(d.video) s")
        }
        let reader = try RawDumpReader(path: dir + "/a.vfdump")
        // The last period (S16 stereo: 4 bytes a frame) ends no earlier than the last frame.
        let lastSound = try #require(reader.audioEntries.last)
        let soundEnd = Double(lastSound.timestampNanoseconds) / 1e9 + Double(lastSound.rawLength / 4) / 48000
        let videoEnd = Double(try #require(reader.entries.last).timestampNanoseconds) / 1e9 + 1.0 / 30
        #expect(soundEnd >= videoEnd - 0.001, "the dump's sound ends \(videoEnd - soundEnd) s before its video")
    }
}

final class FinishWaiter: MovieRecordingDelegate, @unchecked Sendable {
    private let lock = ConditionLock()
    private var done = false
    private var finished: MovieRecordingSummary?
    var summary: MovieRecordingSummary? { lock.withLock { finished } }
    func movieOutput(_ output: MovieFileOutput, didFinishRecordingTo path: String, summary: MovieRecordingSummary, error: MovieRecordingError?) {
        lock.withLock { done = true; finished = summary; lock.broadcast() }
    }
    func wait(seconds: Double) -> Bool {
        let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
        return lock.withLock {
            while !done { if !lock.wait(untilMonotonicNanoseconds: deadline) { break } }
            return done
        }
    }
}
